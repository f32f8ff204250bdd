/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What every probe set shares: the ring buffer and its lost counts, the
 * traced processes and their stamps (token, phase, op), the model files.
 * An event is reserved, stamped with fill_hdr and submitted through the
 * helpers here, so that each one is lost, stamped and woken for alike.
 */
#ifndef IOCORR_COMMON_BPF_H
#define IOCORR_COMMON_BPF_H

#define SIGSTOP 19
#define RB_WAKEUP_BYTES (512 * 1024)

/* Set at load time by user space: --probe ops, whose op stamps events. */
const volatile bool probe_ops = false;

/* Token and phase of the most recent llama_decode of any traced process,
 * for events that run in other contexts (block completions, kswapd). */
struct stamp {
	__u32 token;
	__u8 phase;
};
struct stamp last_stamp = {};

struct proc_state {
	__u32 token;
	__u32 phase;
	__u32 graph_seq;
	__u32 op_seq;
	__u64 last_node; /* dst of the op most recently entered (op probes) */
	__u64 op_hits;   /* op-probe hits, every thread */
	/* Bumped when a syscall that changes the process's mappings enters
	 * and when it returns (see "the VMA cache"). */
	__u64 vma_gen;
};

struct file_key {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 20); /* overridden by user space */
} events SEC(".maps");

/* Per event type: records the ring buffer had no room for. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EV_TYPE_MAX);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct proc_state);
} traced SEC(".maps");

/* Model files: their page-cache and readahead events are kept whoever
 * causes them (evictions run in kswapd or other tasks). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct file_key);
	__type(value, __u8);
} files SEC(".maps");

/* Thread → op sequence number of the op it is running (op probes). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} cur_op SEC(".maps");

/* Event types that user space must see at once: the process may be
 * stopped waiting for it, or they are rare. The rest wake the reader only
 * when enough has piled up; the reader also polls on a short deadline. */
static __always_inline __u64 wakeup_flags(__u16 type)
{
	if (type == EV_MMAP || type == EV_TASK)
		return BPF_RB_FORCE_WAKEUP;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= RB_WAKEUP_BYTES)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void count_lost(__u32 type)
{
	__u64 *n = bpf_map_lookup_elem(&lost, &type);
	if (n)
		*n += 1;
}

static __always_inline void *reserve(__u64 size, __u16 type)
{
	void *e = bpf_ringbuf_reserve(&events, size, 0);
	if (!e)
		count_lost(type);
	return e;
}

static __always_inline void submit(void *e, __u16 type)
{
	bpf_ringbuf_submit(e, wakeup_flags(type));
}

static __always_inline bool is_traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced, &tgid) != NULL;
}

/* fill_hdr stamps an event with the token and phase of its process, or
 * of the last decoding process when the current task is not traced. */
static __always_inline void fill_hdr(struct event_hdr *h, __u16 type)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	h->ts = bpf_ktime_get_ns();
	h->tgid = tgid;
	h->tid = tid;
	h->type = type;
	h->cpu = bpf_get_smp_processor_id();
	h->pad0 = 0;
	h->op = 0;
	if (ps) {
		h->token = ps->token;
		h->phase = ps->phase;
		if (probe_ops) {
			__u32 *op = bpf_map_lookup_elem(&cur_op, &tid);
			if (op)
				h->op = *op;
		}
	} else {
		h->token = last_stamp.token;
		h->phase = last_stamp.phase;
	}
}

static __always_inline bool is_model_file(__u32 dev, __u64 ino)
{
	struct file_key k = {.ino = ino, .dev = dev};
	return bpf_map_lookup_elem(&files, &k) != NULL;
}

#endif /* IOCORR_COMMON_BPF_H */
