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
	__u32 pad;
};
volatile struct ggml_layout layout = {
	.t_type = 0, .t_ne = 16, .t_nb = 48, .t_op = 80, .t_src = 152, .t_view_src = 232,
	.t_data = 248, .t_name = 256, .g_n_nodes = 4, .g_nodes = 16, .type_i32 = 26,
};
#define t_type layout.t_type
#define t_ne layout.t_ne
#define t_nb layout.t_nb
#define t_op layout.t_op
#define t_src layout.t_src
#define t_data layout.t_data
#define t_name layout.t_name
#define g_n_nodes layout.g_n_nodes
#define g_nodes layout.g_nodes
#define ggml_type_i32 layout.type_i32

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
};

static __always_inline __u64 read_ptr(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u32 read_u32(__u64 addr)
{
	__u32 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h;
}

/* Emits one EV_NODE for a weight-like source (a leaf: op NONE with data)
 * of a node. Whether it is file-backed is resolved here, at the moment
 * the graph runs, from the VMA that holds its data. */
static __always_inline void emit_src(struct walk_ctx *w, __u64 node, __u32 idx, __u32 node_op, __u32 slot, __u64 src)
{
	struct node_event *e;
	struct vma_info vi = {};
	__u64 data;

	if (!src)
		return;
	if (read_u32(src + t_op) != 0) /* GGML_OP_NONE: a leaf, not a result */
		return;
	data = read_ptr(src + t_data);
	if (!data)
		return;
	e = reserve(sizeof(*e), EV_NODE);
	if (!e)
		return;
	e->hdr = w->hdr;
	e->hdr.type = EV_NODE;
	e->graph_id = w->graph_id;
	e->node = node;
	e->weight = src;
	e->weight_data = data;
	bpf_probe_read_user(e->weight_ne, sizeof(e->weight_ne), (void *)(src + t_ne));
	bpf_probe_read_user(e->weight_nb, sizeof(e->weight_nb), (void *)(src + t_nb));
	vi.addr = data;
	bpf_find_vma(bpf_get_current_task_btf(), data, vma_cb, &vi, 0);
	e->ino = vi.ino;
	e->dev = vi.dev;
	e->file_off = vi.file_off;
	e->node_idx = idx;
	e->op = node_op;
	e->weight_type = read_u32(src + t_type);
	e->src_slot = slot;
	e->pad = 0;
	bpf_probe_read_user_str(e->node_name, sizeof(e->node_name), (void *)(node + t_name));
	bpf_probe_read_user_str(e->weight_name, sizeof(e->weight_name), (void *)(src + t_name));
	w->n_weight++;
	bpf_ringbuf_submit(e, wakeup_flags(EV_NODE));
}

static long walk_node(__u64 i, void *data)
{
	struct walk_ctx *w = data;
	__u64 node, srcs[GGML_MAX_SRC] = {};
	__u32 op;

	if (i >= w->n_nodes)
		return 1;
	node = read_ptr(w->nodes + i * 8);
	if (!node)
		return 0;
	op = read_u32(node + t_op);
	bpf_probe_read_user(srcs, sizeof(srcs), (void *)(node + t_src));
	for (int s = 0; s < GGML_MAX_SRC; s++)
		emit_src(w, node, i, op, s, srcs[s]);
	return 0;
}

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
	__u8 one = 1;

	if (!ps)
		return 0;
	ps->graph_seq += 1;
	n_nodes = (__s32)read_u32(g + g_n_nodes);
	if (n_nodes < 0 || n_nodes > MAX_GRAPH_NODES)
		n_nodes = 0;
	w.nodes = read_ptr(g + g_nodes);
	w.n_nodes = n_nodes;
	/* A fingerprint, not a full hash: llama.cpp rebuilds or reuses the
	 * same graph each token, so its size, node array and a few nodes with
	 * their first source identify it without walking all of it. */
	id = mix(0, g);
	id = mix(id, n_nodes);
	id = mix(id, w.nodes);
	if (n_nodes > 0) {
		n0 = read_ptr(w.nodes);
		n1 = read_ptr(w.nodes + (__u64)(n_nodes / 2) * 8);
		n2 = read_ptr(w.nodes + (__u64)(n_nodes - 1) * 8);
		id = mix(id, n0);
		id = mix(id, read_ptr(n0 + t_src));
		id = mix(id, n1);
		id = mix(id, read_ptr(n1 + t_src));
		id = mix(id, n2);
		id = mix(id, read_ptr(n2 + t_src));
		id = mix(id, read_u32(n2 + t_op));
	}
	w.graph_id = id;
	fill_hdr(&w.hdr, EV_GRAPH);
	e = reserve(sizeof(*e), EV_GRAPH);
	if (!e)
		return 0;
	e->hdr = w.hdr;
	e->cgraph = g;
	e->graph_id = id;
	e->n_nodes = n_nodes;
	e->seq = ps->graph_seq;
	e->is_new = bpf_map_update_elem(&graphs_seen, &id, &one, BPF_NOEXIST) == 0;
	e->file = bpf_get_attach_cookie(ctx);
	e->stopped = 0;
	{
		/* --probe ops: the first graph a file computes tells which CPU
		 * backend runs; stop the process so that its ops are probed
		 * before any of them runs (user space attaches, then SIGCONT). */
		__u32 *want = bpf_map_lookup_elem(&ops_pending, &e->file);
		if (want && __sync_val_compare_and_swap(want, 1, 2) == 1 && bpf_send_signal(SIGSTOP) == 0)
			e->stopped = 1;
	}
	e->n_weight_nodes = 0;
	if (e->is_new && n_nodes > 0)
		bpf_loop(n_nodes, walk_node, &w, 0);
	e->n_weight_nodes = w.n_weight;
	/* The graph event follows its nodes in the ring buffer only if it is
	 * submitted last; readers key nodes by graph_id, so order is free. */
	submit(e, EV_GRAPH);
	return 0;
}

/* ---- ggml: ops and experts -------------------------------------------- */

/* ggml_compute_forward_*(const struct ggml_compute_params *params,
 * struct ggml_tensor *dst): params->ith (first field) is the thread. */
static __always_inline int op_enter(struct pt_regs *ctx, void *params, void *dst)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);
	struct op_event *e;
	__u64 node = (__u64)dst, prev;
	__s32 ith = 0;
	__u32 seq;

	if (!ps)
		return 0;
	__sync_fetch_and_add(&ps->op_hits, 1);
	bpf_probe_read_user(&ith, sizeof(ith), params);
	/* Every thread of an op enters with the same dst; the first to swap
	 * last_node numbers the op, the others take its number. */
	prev = ps->last_node;
	if (prev != node && __sync_val_compare_and_swap(&ps->last_node, prev, node) == prev)
		__sync_fetch_and_add(&ps->op_seq, 1);
	seq = ps->op_seq;
	bpf_map_update_elem(&cur_op, &tid, &seq, BPF_ANY);
	if (ith != 0)
		return 0;
	e = reserve(sizeof(*e), EV_OP);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_OP);
	e->hdr.op = seq;
	e->node = node;
	e->fn = bpf_get_attach_cookie(ctx);
	e->op = read_u32(node + t_op);
	bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)(node + t_name));
	submit(e, EV_OP);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(op_begin, void *params, void *dst)
{
	return op_enter(ctx, params, dst);
}

/* The same, attached to a hundred functions through one uprobe_multi link:
 * one link is set up and torn down in one go, where a hundred single
 * uprobes take minutes to detach (each waits for an RCU grace period). */
SEC("uprobe.multi")
int BPF_KPROBE(op_begin_multi, void *params, void *dst)
{
	return op_enter(ctx, params, dst);
}

static __always_inline bool name_has_prefix(const char *name, const char *prefix, int n)
{
	for (int i = 0; i < n; i++)
		if (name[i] != prefix[i])
			return false;
	return true;
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

/* One experts event: rows [chunk*rows_per_event, ...) of the ids tensor. */
static long emit_experts_chunk(__u64 chunk, void *data)
{
	struct experts_ctx *x = data;
	struct experts_event *e;
	__u32 row = chunk * x->rows_per_event, count = 0;
	__u32 sz = x->n_used * 4;

	if (row >= x->n_tokens)
		return 1;
	e = reserve(sizeof(*e), EV_EXPERTS);
	if (!e)
		return 1;
	fill_hdr(&e->hdr, EV_EXPERTS);
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
	submit(e, EV_EXPERTS);
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
	__u64 node = (__u64)dst;
	__s64 ne[4] = {}, nb[4] = {};
	struct experts_ctx x = {};
	__s32 ith = 0;

	if (!is_traced(tgid))
		return 0;
	bpf_probe_read_user(&ith, sizeof(ith), params);
	if (ith != 0)
		return 0;
	bpf_probe_read_user_str(x.name, sizeof(x.name), (void *)(node + t_name));
	if (!name_has_prefix(x.name, "ffn_moe_weights", 15))
		return 0;
	x.ids = read_ptr(node + t_src + 8);
	if (!x.ids || read_u32(x.ids + t_type) != ggml_type_i32)
		return 0;
	x.data = read_ptr(x.ids + t_data);
	bpf_probe_read_user(ne, sizeof(ne), (void *)(x.ids + t_ne));
	bpf_probe_read_user(nb, sizeof(nb), (void *)(x.ids + t_nb));
	/* More than 32 experts per token is outside every MoE we know of;
	 * such a tensor is not what we think it is. */
	if (!x.data || ne[0] <= 0 || ne[0] > 32 || ne[1] <= 0 || nb[1] <= 0)
		return 0;
	x.n_used = ne[0];
	x.n_tokens = ne[1] > 65536 ? 65536 : ne[1];
	/* The ids are a view (top-k of an argsort): rows are nb[1] apart, not
	 * n_used * 4, so each token's row is read on its own. */
	x.row_stride = nb[1];
	x.rows_per_event = IOCORR_MAX_EXPERT_IDS / x.n_used;
	bpf_loop((x.n_tokens + x.rows_per_event - 1) / x.rows_per_event, emit_experts_chunk, &x, 0);
	return 0;
}

/* ---- uprobe cost --------------------------------------------------------- */

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
