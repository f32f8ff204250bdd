/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * llama.cpp's llama_decode: each call is a token step of the process,
 * whose number and phase stamp every event after it. Entry and return
 * are paired by thread in decode_starts.
 */

struct decode_start {
	__u64 ts;
	__u64 ctx;
	__s32 n_tokens;
	__s32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct decode_start);
} decode_starts SEC(".maps");

/* struct llama_batch of llama.h: n_tokens, then token, embd, pos,
 * n_seq_id, seq_id and logits pointers (LP64: 56 bytes). */
struct llama_batch_abi {
	__s32 n_tokens;
	__s32 pad;
	__u64 token, embd, pos;
	__u64 n_seq_id; /* int32_t[n_tokens] */
	__u64 seq_id;   /* int32_t *[n_tokens], each n_seq_id[i] long */
	__u64 logits;
};

/* A prefill batch is n_batch tokens (2048 by default); past these the
 * set is marked partial rather than the probe made slower. */
#define SEQ_MAX_TOKENS 8192
#define SEQ_MAX_PER_TOKEN 8

/* Without bpf_loop the walk is a bounded loop over this many tokens: a
 * decode step of up to that many sequences, and the head of a prefill
 * batch (the rest is marked partial). */
#define SEQ_FALLBACK_TOKENS 256

/* Every field after b is 8 bytes wide: the walk's zeroing stores whole
 * registers on the stack, and 6.1's verifier refuses a narrower load from
 * a slot a register was spilled to ("invalid size of register fill"). */
struct seq_walk {
	struct llama_batch_abi b;
	__u64 seqs;
	__u64 state;
	__u64 ntok[SEQ_COUNTED];
};

static __always_inline long seq__token_of(struct seq_walk *w, __u32 i)
{
	__s32 n = 0;
	__u64 ids = 0;
	__s32 id[SEQ_MAX_PER_TOKEN] = {};

	if (bpf_probe_read_user(&n, sizeof(n), (void *)(w->b.n_seq_id + (__u64)i * 4)) ||
	    bpf_probe_read_user(&ids, sizeof(ids), (void *)(w->b.seq_id + (__u64)i * 8)) || !ids) {
		w->state |= SEQ_PARTIAL;
		return 1;
	}
	if (n <= 0)
		return 0;
	if (n > SEQ_MAX_PER_TOKEN) {
		w->state |= SEQ_PARTIAL;
		n = SEQ_MAX_PER_TOKEN;
	}
	/* One read of the token's ids, its size a bounded multiple of 4. */
	if (bpf_probe_read_user(id, (__u32)n * sizeof(id[0]), (void *)ids)) {
		w->state |= SEQ_PARTIAL;
		return 1;
	}
	for (int k = 0; k < SEQ_MAX_PER_TOKEN; k++) {
		if (k >= n)
			break;
		if (id[k] >= 0 && id[k] < 64)
			w->seqs |= 1ULL << id[k];
		else
			w->state |= SEQ_WIDE;
		if (id[k] >= 0 && id[k] < SEQ_COUNTED)
			w->ntok[id[k]] += 1;
		else
			w->state |= SEQ_UNCOUNTED;
	}
	return 0;
}

LOOP_BODY(seq__token, struct seq_walk, seq__token_of)

/* seq__read fills the batch's sequence set and its tokens per sequence;
 * a batch without seq_id is sequence 0 to llama.cpp
 * (llama_batch_get_one). Without bpf_loop the walk is a bounded loop of
 * SEQ_FALLBACK_TOKENS tokens; tokens past it are not read (partial). */
static __always_inline void seq__read(void *batch, struct decode_event *e)
{
	struct seq_walk w = {};
	__u32 n;

	if (bpf_probe_read_user(&w.b, sizeof(w.b), batch) || w.b.n_tokens <= 0)
		return;
	w.state = SEQ_READ;
	if (!w.b.seq_id) {
		e->seqs = 1;
		e->seq_state = SEQ_READ | SEQ_DEFAULT;
		e->seq_tokens[0] = w.b.n_tokens > 0xffff ? 0xffff : w.b.n_tokens;
		return;
	}
	n = w.b.n_tokens;
	if (n > SEQ_MAX_TOKENS) {
		n = SEQ_MAX_TOKENS;
		w.state |= SEQ_PARTIAL;
	}
	if (cfg.use_bpf_loop) {
		bpf_loop(n, seq__token__cb, &w, 0);
	} else {
		(void)LOOP_BOUNDED(seq__token, &w, 0, n, SEQ_FALLBACK_TOKENS);
		if (n > SEQ_FALLBACK_TOKENS)
			w.state |= SEQ_PARTIAL;
	}
	e->seqs = w.seqs;
	e->seq_state = (__u32)w.state;
	for (int k = 0; k < SEQ_COUNTED; k++)
		e->seq_tokens[k] = w.ntok[k] > 0xffff ? 0xffff : (__u16)w.ntok[k];
}

/* llama_decode(struct llama_context *ctx, struct llama_batch batch): the
 * batch is larger than 16 bytes, so the SysV ABI passes it in memory on
 * the stack, just above the return address; n_tokens is its first field. */
SEC("uprobe")
int BPF_KPROBE(decode_begin, void *lctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);
	struct decode_start ds = {};
	struct decode_event *e;
	__s32 n_tokens = 0;
	void *batch;

	if (!ps)
		return 0;
#if defined(__TARGET_ARCH_arm64)
	/* AAPCS64 passes a struct over 16 bytes by reference: x1 holds its address. */
	batch = (void *)PT_REGS_PARM2(ctx);
#else
	batch = (void *)(PT_REGS_SP(ctx) + 8);
#endif
	bpf_probe_read_user(&n_tokens, sizeof(n_tokens), batch);
	runs__flush_all();
	ps->token += 1;
	ps->phase = n_tokens > 1 ? PHASE_PREFILL : PHASE_DECODE;
	last_stamp.token = ps->token;
	last_stamp.phase = ps->phase;

	ds.ts = bpf_ktime_get_ns();
	ds.ctx = (__u64)lctx;
	ds.n_tokens = n_tokens;
	bpf_map_update_elem(&decode_starts, &tid, &ds, BPF_ANY);

	e = event__reserve(sizeof(*e), EV_DECODE_BEGIN);
	if (!e)
		return 0;
	e->ctx = ds.ctx;
	e->begin_ts = ds.ts;
	e->n_tokens = n_tokens;
	e->ret = 0;
	e->op_hits = ps->op_hits;
	e->seqs = 0;
	e->seq_state = 0;
	e->pad = 0;
	__builtin_memset(e->seq_tokens, 0, sizeof(e->seq_tokens));
	seq__read(batch, e);
	ring__submit(e, EV_DECODE_BEGIN);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(decode_end, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct decode_start *ds;
	struct decode_event *e;

	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	if (!ps)
		return 0;
	ds = bpf_map_lookup_elem(&decode_starts, &tid);
	e = event__reserve(sizeof(*e), EV_DECODE_END);
	if (!e)
		return 0;
	e->op_hits = ps->op_hits;
	e->ctx = ds ? ds->ctx : 0;
	e->begin_ts = ds ? ds->ts : 0;
	e->n_tokens = ds ? ds->n_tokens : 0;
	e->ret = ret;
	e->seqs = 0;
	e->seq_state = 0;
	e->pad = 0;
	__builtin_memset(e->seq_tokens, 0, sizeof(e->seq_tokens));
	ring__submit(e, EV_DECODE_END);
	if (ds)
		bpf_map_delete_elem(&decode_starts, &tid);
	return 0;
}
