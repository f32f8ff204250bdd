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

	if (!ps)
		return 0;
#if defined(__TARGET_ARCH_arm64)
	/* AAPCS64 passes a struct over 16 bytes by reference: x1 holds its address. */
	bpf_probe_read_user(&n_tokens, sizeof(n_tokens), (void *)PT_REGS_PARM2(ctx));
#else
	bpf_probe_read_user(&n_tokens, sizeof(n_tokens), (void *)(PT_REGS_SP(ctx) + 8));
#endif
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
	ring__submit(e, EV_DECODE_END);
	if (ds)
		bpf_map_delete_elem(&decode_starts, &tid);
	return 0;
}
