/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * ggml's graph computation in the target: the weights each graph reads
 * (EV_GRAPH, EV_NODE), the op each thread runs (--probe ops) and the
 * experts a MoE layer selects. Read through the struct layout that user
 * space sets per library.
 */

#define GGML_MAX_SRC 10
#define MAX_GRAPH_NODES 65536

/* struct ggml_tensor and struct ggml_cgraph offsets of the target build.
 * Not const: user space learns them per library (DWARF, when a library
 * that is dlopen()ed later has it) after the programs are loaded, and
 * sets them before it attaches the uprobes that read them. */
struct ggml_layout {
	__u32 t_type;
	__u32 t_ne;
	__u32 t_nb;
	__u32 t_op;
	__u32 t_src;
	__u32 t_view_src;
	__u32 t_data;
	__u32 t_name;
	__u32 g_n_nodes;
	__u32 g_nodes;
	__u32 type_i32; /* enum ggml_type GGML_TYPE_I32 */
	__u32 t_buffer;
};
volatile struct ggml_layout layout = {
	.t_type = 0, .t_ne = 16, .t_nb = 48, .t_op = 80, .t_src = 152, .t_view_src = 232,
	.t_data = 248, .t_name = 256, .g_n_nodes = 4, .g_nodes = 16, .type_i32 = 26,
	.t_buffer = 8,
};

static __always_inline __u64 user__read_ptr(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u32 user__read_u32(__u64 addr)
{
	__u32 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

/* One reader per field of the target's structs, at the offsets of
 * `layout`: the only code that knows where a field lies. */
static __always_inline __u32 tensor__op(__u64 t)
{
	return user__read_u32(t + layout.t_op);
}

static __always_inline __u32 tensor__type(__u64 t)
{
	return user__read_u32(t + layout.t_type);
}

static __always_inline __u64 tensor__data(__u64 t)
{
	return user__read_ptr(t + layout.t_data);
}

static __always_inline __u64 tensor__buffer(__u64 t)
{
	return user__read_ptr(t + layout.t_buffer);
}

static __always_inline __u64 tensor__src(__u64 t, __u32 i)
{
	return user__read_ptr(t + layout.t_src + i * 8);
}

static __always_inline void tensor__srcs(__u64 t, __u64 srcs[GGML_MAX_SRC])
{
	bpf_probe_read_user(srcs, GGML_MAX_SRC * sizeof(__u64), (void *)(t + layout.t_src));
}

/* tensor__shape reads ne[4] and nb[4]: elements and byte strides. */
static __always_inline void tensor__shape(__u64 t, void *ne, void *nb)
{
	bpf_probe_read_user(ne, 4 * sizeof(__u64), (void *)(t + layout.t_ne));
	bpf_probe_read_user(nb, 4 * sizeof(__u64), (void *)(t + layout.t_nb));
}

static __always_inline void tensor__name(__u64 t, char name[IOCORR_NAME_LEN])
{
	bpf_probe_read_user_str(name, IOCORR_NAME_LEN, (void *)(t + layout.t_name));
}

static __always_inline __u32 cgraph__n_nodes(__u64 g)
{
	return user__read_u32(g + layout.g_n_nodes);
}

static __always_inline __u64 cgraph__nodes(__u64 g)
{
	return user__read_ptr(g + layout.g_nodes);
}

/* The thread of a ggml_compute_forward_*(params, dst) call: params->ith,
 * the first field of struct ggml_compute_params. */
static __always_inline __s32 ggml__thread(void *params)
{
	__s32 ith = 0;

	bpf_probe_read_user(&ith, sizeof(ith), params);
	return ith;
}

/* Files (graph_compute attach cookies) whose op probes wait for their
 * first graph: 1 waiting, 2 the process was stopped for the attach. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} ops_pending SEC(".maps");

/* Graph fingerprints whose nodes were already emitted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} graphs_seen SEC(".maps");

/* ---- ggml: graphs ------------------------------------------------------ */

struct walk_ctx {
	__u64 nodes;    /* struct ggml_tensor ** */
	__u64 graph_id;
	__u32 n_nodes;
	__u32 n_weight;
	struct event_hdr hdr;
	/* The node whose sources are being emitted. */
	__u64 node;
	__u32 node_idx;
	__u32 node_op;
};

static __always_inline __u64 hash__mix(__u64 h, __u64 v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h;
}

/* Emits one EV_NODE for a weight-like source (a leaf: op NONE with data)
 * of w's node. Whether it is file-backed is resolved here, at the moment
 * the graph runs, from the VMA that holds its data.
 * A global function, checked once by the verifier by its arguments'
 * types: inlined once per source slot it made graph_compute 33 760
 * verified instructions, 40 ms of CPU at every recording's start (70% of
 * all the programs' verification). */
__noinline int graph__emit_weight(struct walk_ctx *w, __u32 slot, __u64 src)
{
	struct node_event *e;
	struct vma_info vi = {};
	__u64 data;

	if (!w || !src)
		return 0;
	if (tensor__op(src) != 0) /* GGML_OP_NONE: a leaf, not a result */
		return 0;
	data = tensor__data(src);
	if (!data)
		return 0;
	e = ring__reserve(sizeof(*e), EV_NODE);
	if (!e)
		return 0;
	e->hdr = w->hdr;
	e->hdr.type = EV_NODE;
	e->graph_id = w->graph_id;
	e->node = w->node;
	e->weight = src;
	e->weight_data = data;
	tensor__shape(src, e->weight_ne, e->weight_nb);
	vi.addr = data;
	vma__find(&vi);
	e->ino = vi.ino;
	e->dev = vi.dev;
	e->file_off = vi.file_off;
	e->weight_buffer = tensor__buffer(src);
	e->node_idx = w->node_idx;
	e->op = w->node_op;
	e->weight_type = tensor__type(src);
	e->src_slot = slot;
	e->vma_busy = vi.busy;
	tensor__name(w->node, e->node_name);
	tensor__name(src, e->weight_name);
	w->n_weight++;
	ring__submit(e, EV_NODE);
	return 0;
}

/* The nodes of a graph whose expert ids come in from another backend, by
 * graph_id: where a GPU backend runs the router (llama.cpp's -ngl with
 * --cpu-moe, --n-cpu-moe or -ot exps=CPU), the CPU's split gets the ids
 * as an input the scheduler copied over before the split runs, and no
 * get_rows of the router's weights runs on the CPU. Found in the graph's
 * first walk, read at each of its computations. */
#define GRAPH_MOE_NODES 8

struct graph_moe {
	__u32 n;
	__u32 idx[GRAPH_MOE_NODES];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* graph_id */
	__type(value, struct graph_moe);
} graph_moes SEC(".maps");

static __always_inline bool str__has_prefix(const char *name, const char *prefix, int n)
{
	for (int i = 0; i < n; i++)
		if (name[i] != prefix[i])
			return false;
	return true;
}

/* tensor__is_input_ids says whether ids, a node's src[2], holds expert ids
 * that are already computed when the graph starts: an I32 leaf (op NONE;
 * in a graph that computes its own router the ids are a view of the
 * top-k, computed later in the graph) of 2 dimensions. */
static __always_inline bool tensor__is_input_ids(__u64 ids)
{
	return ids && tensor__op(ids) == 0 && tensor__type(ids) == layout.type_i32;
}

/* graph__note_moe remembers node i of w's graph when it is a MoE node of
 * llama.cpp (named ffn_moe_*: the expert matmuls, and gpt-oss's bias add,
 * all of which take the ids in src[2]) whose ids are an input. */
static __always_inline void graph__note_moe(struct walk_ctx *w, __u64 i, __u64 ids)
{
	struct graph_moe fresh = {}, *gm;
	char name[16] = {};
	__u64 graph_id;

	if (!tensor__is_input_ids(ids))
		return;
	bpf_probe_read_user_str(name, sizeof(name), (void *)(w->node + layout.t_name));
	if (!str__has_prefix(name, "ffn_moe_", 8))
		return;
	/* A key on the stack: 6.1's verifier takes no other memory as a
	 * map key, and w is a global function's argument on the bounded
	 * loops' path. */
	graph_id = w->graph_id;
	gm = bpf_map_lookup_elem(&graph_moes, &graph_id);
	if (!gm) {
		bpf_map_update_elem(&graph_moes, &graph_id, &fresh, BPF_NOEXIST);
		gm = bpf_map_lookup_elem(&graph_moes, &graph_id);
		if (!gm)
			return;
	}
	if (gm->n < GRAPH_MOE_NODES)
		gm->idx[gm->n & (GRAPH_MOE_NODES - 1)] = i;
	gm->n += 1;
}

/* graph__walk_one emits the weights of node i: 1 past the last node. */
static __always_inline long graph__walk_one(struct walk_ctx *w, __u64 i)
{
	__u64 node, srcs[GGML_MAX_SRC] = {};

	if (i >= w->n_nodes)
		return 1;
	node = user__read_ptr(w->nodes + i * 8);
	if (!node)
		return 0;
	w->node = node;
	w->node_idx = i;
	w->node_op = tensor__op(node);
	tensor__srcs(node, srcs);
	for (int s = 0; s < GGML_MAX_SRC; s++)
		graph__emit_weight(w, s, srcs[s]);
	graph__note_moe(w, i, srcs[2]);
	return 0;
}

LOOP_BODY(graph__walk_node, struct walk_ctx, graph__walk_one)

/* Without bpf_loop a graph is walked GRAPH_WALK_BOUND nodes per
 * computation; where one stops, the graph's next computation goes on
 * (llama.cpp computes the same graph again for every token), so a graph
 * computed often enough is walked whole and in order, as bpf_loop walks
 * it at once. The nodes never walked are counted at the end of the run
 * (Tracer.LoopsCut): graph_walks' unwalked tails, and LOOP_CUT_GRAPH_NODES
 * for graphs the map had no room for. */
#define GRAPH_WALK_BOUND 1024

struct graph_walk {
	__u32 next;
	__u32 n_nodes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* graph_id */
	__type(value, struct graph_walk);
} graph_walks SEC(".maps");

/* graph__walk_bounded walks the next chunk of a graph: 1 when it emitted
 * the graph's nodes (or some of them). */
static __always_inline __u32 graph__walk_bounded(struct walk_ctx *w, bool first_seen)
{
	struct graph_walk *gw = bpf_map_lookup_elem(&graph_walks, &w->graph_id);
	__u32 from, i;

	if (!gw) {
		struct graph_walk fresh = {.next = 0, .n_nodes = w->n_nodes};

		if (!first_seen)
			return 0;
		if (bpf_map_update_elem(&graph_walks, &w->graph_id, &fresh, BPF_NOEXIST) != 0) {
			loops__cut(LOOP_CUT_GRAPH_NODES, w->n_nodes);
			return 0;
		}
		gw = bpf_map_lookup_elem(&graph_walks, &w->graph_id);
		if (!gw)
			return 0;
	}
	from = gw->next;
	if (from >= w->n_nodes)
		return 0;
	i = LOOP_BOUNDED(graph__walk_node, w, from, w->n_nodes - from, GRAPH_WALK_BOUND);
	gw->next = from + i;
	return 1;
}

__noinline int graph__experts(__u64 nodes, __u64 graph_id, __s32 n_nodes);

/* A graph computation under way, by thread: graph_compute_ret times it. */
struct graph_start {
	__u64 ts;
	__u64 graph_id;
	__u32 seq;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tid */
	__type(value, struct graph_start);
} graph_starts SEC(".maps");

/* ggml_graph_compute(struct ggml_cgraph *cgraph, struct ggml_cplan *cplan):
 * once per graph, so reading the graph here costs one uprobe hit per
 * token however many ops run. */
SEC("uprobe")
int BPF_KPROBE(graph_compute, void *cgraph)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);
	struct graph_event *e;
	struct walk_ctx w = {};
	__u64 g = (__u64)cgraph, id, n0, n1, n2;
	__s32 n_nodes;
	__u32 file;
	__u8 one = 1;

	if (!ps)
		return 0;
	ps->graph_seq += 1;
	n_nodes = (__s32)cgraph__n_nodes(g);
	if (n_nodes < 0 || n_nodes > MAX_GRAPH_NODES)
		n_nodes = 0;
	w.nodes = cgraph__nodes(g);
	w.n_nodes = n_nodes;
	/* A fingerprint, not a full hash: llama.cpp rebuilds or reuses the
	 * same graph each token, so its size, node array and a few nodes with
	 * their first source identify it without walking all of it. */
	id = hash__mix(0, g);
	id = hash__mix(id, n_nodes);
	id = hash__mix(id, w.nodes);
	if (n_nodes > 0) {
		n0 = user__read_ptr(w.nodes);
		n1 = user__read_ptr(w.nodes + (__u64)(n_nodes / 2) * 8);
		n2 = user__read_ptr(w.nodes + (__u64)(n_nodes - 1) * 8);
		id = hash__mix(id, n0);
		id = hash__mix(id, tensor__src(n0, 0));
		id = hash__mix(id, n1);
		id = hash__mix(id, tensor__src(n1, 0));
		id = hash__mix(id, n2);
		id = hash__mix(id, tensor__src(n2, 0));
		id = hash__mix(id, tensor__op(n2));
	}
	w.graph_id = id;
	e = event__reserve(sizeof(*e), EV_GRAPH);
	if (!e)
		return 0;
	/* Its EV_NODE records share the graph's header. */
	w.hdr = e->hdr;
	e->cgraph = g;
	e->graph_id = id;
	e->n_nodes = n_nodes;
	e->seq = ps->graph_seq;
	e->is_new = bpf_map_update_elem(&graphs_seen, &id, &one, BPF_NOEXIST) == 0;
	file = bpf_get_attach_cookie(ctx);
	e->file = file;
	e->stopped = 0;
	{
		/* --probe ops: the first graph a file computes tells which CPU
		 * backend runs; stop the process so that its ops are probed
		 * before any of them runs (user space attaches, then SIGCONT).
		 * The key is a copy on the stack: a verifier before 6.2 or so
		 * takes no map key inside a ring-buffer record (6.1 refused it:
		 * "R2 type=alloc_mem expected=fp, ..."). */
		__u32 *want = bpf_map_lookup_elem(&ops_pending, &file);
		if (want && __sync_val_compare_and_swap(want, 1, 2) == 1)
			e->stopped = proc__stop();
	}
	e->n_weight_nodes = 0;
	if (cfg.use_bpf_loop && e->is_new && n_nodes > 0)
		bpf_loop(n_nodes, graph__walk_node__cb, &w, 0);
	if (!cfg.use_bpf_loop && n_nodes > 0)
		e->is_new = graph__walk_bounded(&w, e->is_new);
	e->n_weight_nodes = w.n_weight;
	/* The graph event follows its nodes in the ring buffer only if it is
	 * submitted last; readers key nodes by graph_id, so order is free. */
	{
		struct graph_start gs = {.ts = w.hdr.ts, .graph_id = id, .seq = ps->graph_seq};
		__u32 tid = (__u32)bpf_get_current_pid_tgid();

		bpf_map_update_elem(&graph_starts, &tid, &gs, BPF_ANY);
	}
	ring__submit(e, EV_GRAPH);
	graph__experts(w.nodes, id, n_nodes);
	return 0;
}

/* ggml_graph_compute's return: how long the CPU computed the graph. */
SEC("uretprobe")
int BPF_KRETPROBE(graph_compute_ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct graph_start *gs = bpf_map_lookup_elem(&graph_starts, &tid);
	struct graph_end_event *e;

	if (!gs)
		return 0;
	e = event__reserve(sizeof(*e), EV_GRAPH_END);
	if (e) {
		e->graph_id = gs->graph_id;
		e->begin_ts = gs->ts;
		e->seq = gs->seq;
		e->pad = 0;
		ring__submit(e, EV_GRAPH_END);
	}
	bpf_map_delete_elem(&graph_starts, &tid);
	return 0;
}

/* ---- ggml: ops and experts -------------------------------------------- */

/* ggml_compute_forward_*(const struct ggml_compute_params *params,
 * struct ggml_tensor *dst), on each of the op's threads. */
static __always_inline int op__enter(struct pt_regs *ctx, void *params, void *dst)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);
	struct op_event *e;
	__u64 node = (__u64)dst, prev;
	__s32 ith;
	__u32 seq;

	if (!ps)
		return 0;
	__sync_fetch_and_add(&ps->op_hits, 1);
	ith = ggml__thread(params);
	/* Every thread of an op enters with the same dst; the first to swap
	 * last_node numbers the op, the others take its number. */
	prev = ps->last_node;
	if (prev != node && __sync_val_compare_and_swap(&ps->last_node, prev, node) == prev)
		__sync_fetch_and_add(&ps->op_seq, 1);
	seq = ps->op_seq;
	bpf_map_update_elem(&cur_op, &tid, &seq, BPF_ANY);
	if (ith != 0)
		return 0;
	e = event__reserve(sizeof(*e), EV_OP);
	if (!e)
		return 0;
	e->hdr.op = seq;
	e->node = node;
	e->fn = bpf_get_attach_cookie(ctx);
	e->op = tensor__op(node);
	tensor__name(node, e->name);
	ring__submit(e, EV_OP);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(op_begin, void *params, void *dst)
{
	return op__enter(ctx, params, dst);
}

/* The same, attached to a hundred functions through one uprobe_multi link:
 * one link is set up and torn down in one go, where a hundred single
 * uprobes take minutes to detach (each waits for an RCU grace period). */
SEC("uprobe.multi")
int BPF_KPROBE(op_begin_multi, void *params, void *dst)
{
	return op__enter(ctx, params, dst);
}

struct experts_ctx {
	__u64 ids;
	__u64 data;
	__u64 row_stride;
	__u32 n_used;
	__u32 n_tokens;
	__u32 rows_per_event;
	__u32 pad;
	char name[IOCORR_NAME_LEN];
};

/* One experts event: rows [chunk*rows_per_event, ...) of the ids tensor;
 * 1 when there are no more. */
static __always_inline long experts__emit(struct experts_ctx *x, __u64 chunk)
{
	struct experts_event *e;
	__u32 row = chunk * x->rows_per_event, count = 0;
	__u32 sz = x->n_used * 4;

	if (row >= x->n_tokens)
		return 1;
	e = event__reserve(sizeof(*e), EV_EXPERTS);
	if (!e)
		return 1;
	e->tensor = x->ids;
	e->n_used = x->n_used;
	e->n_tokens = x->n_tokens;
	e->first = row * x->n_used;
	__builtin_memcpy(e->name, x->name, sizeof(e->name));
	for (int r = 0; r < IOCORR_MAX_EXPERT_IDS; r++) {
		__u32 off = count;

		if (r >= x->rows_per_event || row >= x->n_tokens)
			break;
		if (off > IOCORR_MAX_EXPERT_IDS - 32 || sz == 0 || sz > 128)
			break;
		bpf_probe_read_user(&e->ids[off], sz, (void *)(x->data + (__u64)row * x->row_stride));
		count += x->n_used;
		row++;
	}
	e->count = count;
	ring__submit(e, EV_EXPERTS);
	return 0;
}

LOOP_BODY(experts__emit_chunk, struct experts_ctx, experts__emit)

/* Without bpf_loop one MoE node's ids are read EXPERT_CHUNK_BOUND events
 * at most: 448 tokens of a ubatch at 16 experts per token, 832 at 8 and
 * 3,136 at 2. The ids are valid only while the node runs, so the rows past
 * the bound are lost: counted in LOOP_CUT_EXPERT_ROWS, and the run's
 * picks are then NA (rundir.Meta.PicksNA). */
#define EXPERT_CHUNK_BOUND 64

static __always_inline void experts__emit_bounded(struct experts_ctx *x)
{
	__u32 chunks = (x->n_tokens + x->rows_per_event - 1) / x->rows_per_event;
	__u32 c = LOOP_BOUNDED(experts__emit_chunk, x, 0, chunks, EXPERT_CHUNK_BOUND);

	if (c >= EXPERT_CHUNK_BOUND && chunks > EXPERT_CHUNK_BOUND)
		loops__cut(LOOP_CUT_EXPERT_ROWS, x->n_tokens - EXPERT_CHUNK_BOUND * x->rows_per_event);
}

/* experts__emit_ids emits the rows of ids (an I32 [n_used, n_tokens]
 * tensor) for node's layer: 0 when they are not what we take them for. */
static __always_inline int experts__emit_ids(struct experts_ctx *x, __u64 node, __u64 ids)
{
	__s64 ne[4] = {}, nb[4] = {};

	x->ids = ids;
	x->data = tensor__data(ids);
	tensor__shape(ids, ne, nb);
	/* More than 32 experts per token is outside every MoE we know of;
	 * such a tensor is not what we think it is. */
	if (!x->data || ne[0] <= 0 || ne[0] > 32 || ne[1] <= 0 || nb[1] <= 0)
		return 0;
	x->n_used = ne[0];
	x->n_tokens = ne[1] > 65536 ? 65536 : ne[1];
	/* The ids are a view (top-k of an argsort), or a copy of one laid out
	 * alike: rows are nb[1] apart, not n_used * 4, so each token's row is
	 * read on its own. */
	x->row_stride = nb[1];
	/* The read of a row must fit the event whatever n_used is, and the
	 * verifier cannot relate a row's offset to its size: a row starts at
	 * IOCORR_MAX_EXPERT_IDS - 32 ids at the latest (experts__emit), so an
	 * event holds that many ids' rows and one more. Sized as the event's
	 * whole array, an event silently lost its last rows (15 of 64 at two
	 * experts a token, 3 of 16 at eight). */
	x->rows_per_event = (IOCORR_MAX_EXPERT_IDS - 32) / x->n_used + 1;
	if (cfg.use_bpf_loop)
		bpf_loop((x->n_tokens + x->rows_per_event - 1) / x->rows_per_event, experts__emit_chunk__cb, x, 0);
	else
		experts__emit_bounded(x);
	return 1;
}

/* Where graph__experts stands in a graph's noted MoE nodes. */
struct moe_cursor {
	__u64 nodes;
	__u64 graph_id;
	__u64 ids;  /* the last ids found */
	__u64 node; /* the node that takes them */
	__u32 k;    /* the next noted node to look at */
	__s32 n_nodes;
};

/* moe__next moves c to the next noted node whose input ids differ from
 * the last found (a layer's gate, up and down matmuls share one copy):
 * 1 when there is one. A global function, checked once. */
__noinline int moe__next(struct moe_cursor *c)
{
	struct graph_moe *gm;
	__u64 node, ids, graph_id;
	__u32 n, i;

	if (!c)
		return 0;
	graph_id = c->graph_id; /* on the stack, as graph__note_moe's */
	gm = bpf_map_lookup_elem(&graph_moes, &graph_id);
	if (!gm)
		return 0;
	n = gm->n < GRAPH_MOE_NODES ? gm->n : GRAPH_MOE_NODES;
	for (int j = 0; j < GRAPH_MOE_NODES; j++) {
		__u32 k = c->k;

		if (k >= n || k >= GRAPH_MOE_NODES)
			return 0;
		c->k = k + 1;
		i = gm->idx[k];
		if (i >= (__u32)c->n_nodes)
			continue;
		node = user__read_ptr(c->nodes + (__u64)i * 8);
		if (!node)
			continue;
		ids = tensor__src(node, 2);
		if (ids == c->ids || !tensor__is_input_ids(ids))
			continue;
		c->ids = ids;
		c->node = node;
		return 1;
	}
	return 0;
}

/* A graph's distinct input ids read at most: one per layer whose experts
 * the CPU computes in the split (one in llama.cpp's splits, where each
 * layer's attention runs on the GPU in between). */
#define GRAPH_MOE_IDS 4

/* graph__experts reads the expert ids the graph's noted MoE nodes take
 * as input, at the graph's start: the scheduler copied them in before it
 * computes the split (the CPU backend computes synchronously). */
/* A global function, so that its frame is not added to graph_compute's
 * walk of the graph (6.1's verifier caps a chain of calls at 512 bytes of
 * stack, each frame rounded up to 32: inlined, this made 608). */
__noinline int graph__experts(__u64 nodes, __u64 graph_id, __s32 n_nodes)
{
	struct moe_cursor c = {.nodes = nodes, .graph_id = graph_id, .n_nodes = n_nodes};
	struct experts_ctx x = {};

	for (int d = 0; d < GRAPH_MOE_IDS; d++) {
		if (!moe__next(&c))
			return 0;
		tensor__name(c.node, x.name);
		experts__emit_ids(&x, c.node, c.ids);
	}
	/* More: counted as cut rows, so that the run's picks say NA. */
	if (moe__next(&c))
		loops__cut(LOOP_CUT_EXPERT_ROWS, 1);
	return 0;
}

/* ggml_compute_forward_get_rows(params, dst) for the node that gathers the
 * router weights of the selected experts (llama.cpp names it
 * "ffn_moe_weights-L"): its src[1] holds the expert ids, and they are
 * valid here because a node runs only after its inputs are computed. */
SEC("uprobe")
int BPF_KPROBE(get_rows_begin, void *params, void *dst)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 node = (__u64)dst, ids;
	struct experts_ctx x = {};

	if (!proc__is_traced(tgid))
		return 0;
	if (ggml__thread(params) != 0)
		return 0;
	tensor__name(node, x.name);
	if (!str__has_prefix(x.name, "ffn_moe_weights", 15))
		return 0;
	ids = tensor__src(node, 1);
	if (!ids || tensor__type(ids) != layout.type_i32)
		return 0;
	experts__emit_ids(&x, node, ids);
	return 0;
}

/* ---- ggml: where the weights live ------------------------------------ */

/* ggml_backend_tensor_set(tensor, data, offset, size): a copy into the
 * tensor's buffer. Emitted only when data lies in a file mapping: llama.cpp
 * copies each weight it does not leave mapped (a GPU's, a repacked one)
 * from the model's mapping while loading; the inputs it sets every token
 * come from the heap. */
SEC("uprobe")
int BPF_KPROBE(tensor_set, void *tensor, void *data, __u64 offset, __u64 size)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct vma_info vi = {};
	struct place_event *e;

	if (!proc__is_traced(tgid) || !tensor || !data)
		return 0;
	vi.addr = (__u64)data;
	vma__find(&vi);
	/* Not looked up (the mmap lock was held): user space tells whether
	 * data lay in a model's mapping. */
	if (!vi.ino && !vi.busy)
		return 0;
	e = event__reserve(sizeof(*e), EV_PLACE);
	if (!e)
		return 0;
	e->tensor = (__u64)tensor;
	e->buffer = tensor__buffer((__u64)tensor);
	e->data = (__u64)data;
	e->size = size;
	e->ino = vi.ino;
	e->file_off = vi.file_off;
	e->dev = vi.dev;
	e->vma_busy = vi.busy;
	tensor__name((__u64)tensor, e->name);
	ring__submit(e, EV_PLACE);
	return 0;
}

/* The buffer each thread asked ggml_backend_buffer_name about. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* tid */
	__type(value, __u64);
} bufname_arg SEC(".maps");

/* A name the return probe could not read, by thread: a name is often a
 * string literal (the CPU backend's "CPU_Mapped", in libggml-base's
 * .rodata) whose page the process has not mapped yet when the function
 * returns, and a BPF program cannot fault it in; the caller reads it at
 * once (llama.cpp logs it), so the thread's next call reads it again. */
struct bufname_retry {
	__u64 buffer;
	__u64 name;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* tid */
	__type(value, struct bufname_retry);
} bufname_retries SEC(".maps");

/* bufname__emit records buffer's name from the string at name: 0 when
 * the string could not be read (no record then). */
static __always_inline int bufname__emit(__u64 buffer, __u64 name)
{
	struct bufname_event *e = event__reserve(sizeof(*e), EV_BUFNAME);

	if (!e)
		return 1; /* counted lost by event__reserve: no retry */
	if (bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)name) < 0) {
		bpf_ringbuf_discard(e, 0);
		return 0;
	}
	e->buffer = buffer;
	ring__submit(e, EV_BUFNAME);
	return 1;
}

SEC("uprobe")
int BPF_KPROBE(buffer_name, void *buffer)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__u64 b = (__u64)buffer;
	struct bufname_retry *r;

	if (!proc__is_traced(id >> 32) || !b)
		return 0;
	r = bpf_map_lookup_elem(&bufname_retries, &tid);
	if (r && bufname__emit(r->buffer, r->name))
		bpf_map_delete_elem(&bufname_retries, &tid);
	bpf_map_update_elem(&bufname_arg, &tid, &b, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(buffer_name_ret, const char *name)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 *b = bpf_map_lookup_elem(&bufname_arg, &tid);

	if (!b)
		return 0;
	if (!bufname__emit(*b, (__u64)name)) {
		struct bufname_retry r = {.buffer = *b, .name = (__u64)name};

		bpf_map_update_elem(&bufname_retries, &tid, &r, BPF_ANY);
	}
	bpf_map_delete_elem(&bufname_arg, &tid);
	return 0;
}

/* ---- uprobe cost ---------------------------------------------------- */

/* Hits of the calibration probe, so that a calibration whose probed arm
 * did not run probed is refused rather than reported. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} calib_hits SEC(".maps");

/* The cheapest uprobe program: it measures what a uprobe hit costs by
 * itself (bpf.MeasureUprobeCost), apart from the programs' own work. */
SEC("uprobe")
int calibrate(void *ctx)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&calib_hits, &k);

	if (n)
		*n += 1;
	return 0;
}
