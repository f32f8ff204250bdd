/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What every probe set shares: the ring buffer and its lost counts, the
 * traced processes and their stamps (token, phase, op), the model files.
 * An event is reserved and stamped (event__reserve) and submitted
 * (ring__submit) through the helpers here, so that every one is counted
 * when lost, stamped and woken for alike.
 */
#ifndef IOCORR_COMMON_BPF_H
#define IOCORR_COMMON_BPF_H

#define SIGSTOP 19
#define RB_WAKEUP_BYTES (512 * 1024)

/* page_records of struct config: what the page cache's programs
 * record. Runs (the default), one page_event per folio as the kernel
 * reports them, or both side by side in one ring, so that a test checks
 * the runs against the folios of the very same events; or none, in the
 * tiers without page-cache events (their programs are not attached, and
 * the fault and token paths must not scan run slots that nothing fills). */
#define PAGES_RUNS 0
#define PAGES_FOLIOS 1
#define PAGES_BOTH 2
#define PAGES_NONE 3

/* Every setting of the programs, in one read-only struct that user space
 * sets once before load (bpf/tracer.go, IocorrConfig): the kernel freezes
 * it, so the verifier reads each field as a constant and drops the
 * branches a setting turns off, helpers this kernel lacks included. */
struct config {
	/* iocorr's own process: its block writes are left out. */
	__u32 self_tgid;
	/* log2 of the page size (os.Getpagesize): vm_pgoff and page-cache
	 * indexes count pages of this size. */
	__u32 page_shift;
	/* PAGES_*, above. */
	__u32 page_records;
	/* Page-cache run slots in use: RUN_WAYS per possible CPU, at most
	 * RUN_SLOTS (pagecache.bpf.h). */
	__u32 run_slots;
	/* --probe ops: the thread's op stamps its events. */
	bool probe_ops;
	/* The kernel has bpf_loop (5.17, bpf/caps.go's "loops"): every call
	 * is behind it, so that on an older kernel the verifier drops them as
	 * dead code. Without it user space records the page cache per folio
	 * (whose path has no loop), and the graph walk, the expert picks and
	 * the batch's sequences take bounded loops (5.3, LOOP_BODY below).
	 * What lies past a bound is counted in loops_cut, never dropped
	 * silently. */
	bool use_bpf_loop;
	/* The kernel has bpf_find_vma (5.17, bpf/caps.go): without it faults
	 * go unresolved to user space, which resolves them from the mappings
	 * it saw, and mmap calls are read from their arguments. */
	bool use_find_vma;
	/* Exact residency snapshots: the token start stops its process
	 * (SIGSTOP, held by the ptrace warden where there is one) until the
	 * recorder has read the models' residency and resumes it, so that the
	 * snapshot is the page cache at the token's start, not some
	 * milliseconds later. A disturbance of the traced run: off by
	 * default. */
	bool stop_at_tokens;
	/* Block requests are kept only for devices in `devs`; otherwise for
	 * every device (the model's device may not be known before the child
	 * maps it), and user space sorts them out by extents. */
	bool filter_devs;
	/* FAULT_COUNT_* bits (faults.bpf.h): which faults outside the model
	 * files are counted in the kernel instead of recorded one by one.
	 * Only where the kernel resolves faults (use_find_vma): elsewhere it
	 * cannot tell where a fault is. */
	__u8 count_faults;
	/* A prefetcher acts on the router's picks (iocorr prefetch, record
	 * --prefetch): each experts event wakes the reader at once, since
	 * the experts it names are read within the layer, long before the
	 * reader's next poll. */
	bool wake_picks;
	__u8 pad[1];
};

const volatile struct config cfg = {};

/* LOOP_BODY(name, type, step) writes a loop body once, for step(type *ctx,
 * __u32 i), which returns 1 to stop: name##__global, a global function,
 * and name##__cb, the bpf_loop callback that calls it. The verifier checks
 * a global function once per program, by its arguments' types, where it
 * walks an inlined body once per iteration of a bounded loop (LOOP_BOUNDED,
 * kernels without bpf_loop; 6.1's gave up past a million instructions) and
 * a callback's body once per call site and state: inlined in the callback,
 * the expert rows' loop made graph_compute 21 311 verified instructions and
 * get_rows_begin 4 597, 32 ms of the recorder's CPU at every start, three
 * quarters of all the programs' verification. */
#define LOOP_BODY(name, type, step)                      \
	__noinline int name##__global(type *ctx, __u32 i) \
	{                                                \
		if (!ctx)                                \
			return 1;                        \
		return step(ctx, i);                     \
	}                                                \
	static long name##__cb(__u32 i, void *ctx)       \
	{                                                \
		return name##__global(ctx, i) != 0;      \
	}

/* LOOP_BOUNDED(name, ctx, from, n, bound) runs name##__global(ctx, from + i)
 * for i below n and below bound, until one returns 1: the iterations run,
 * so that the caller counts what the bound cut. */
#define LOOP_BOUNDED(name, ctx, from, n, bound)                             \
	({                                                                  \
		__u32 i__;                                                  \
		for (i__ = 0; i__ < (bound); i__++) {                       \
			if (i__ >= (n) || name##__global((ctx), (from) + i__)) \
				break;                                      \
		}                                                           \
		i__;                                                        \
	})

/* loops_cut's keys: what the bounded loops (no bpf_loop) left unread. */
enum loop_cut {
	LOOP_CUT_GRAPH_NODES = 0, /* nodes of graphs that could not be tracked */
	LOOP_CUT_EXPERT_ROWS = 1, /* token rows of expert ids past the bound */
	LOOP_CUT_MAX = 4,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOOP_CUT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} loops_cut SEC(".maps");

static __always_inline void loops__cut(__u32 what, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&loops_cut, &what);

	if (v)
		*v += n;
}

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
	 * and when it returns (see vma.bpf.h). */
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

/* The record of syscalls/sys_exit_* (its format file): not the same
 * struct as raw_syscalls' sys_exit, so it is spelled out here. */
struct sys_exit_args {
	struct trace_entry ent;
	int syscall_nr;
	long ret;
};

/* The record of syscalls/sys_enter_* (its format file). */
struct sys_enter_args {
	struct trace_entry ent;
	int syscall_nr;
	unsigned long args[6];
};

/* fd__file is the current task's open file fd, NULL when there is none. */
static __always_inline struct file *fd__file(__u32 fd)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *f = NULL;

	if (!fdt || fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	fds = BPF_CORE_READ(fdt, fd);
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	return f;
}

/* Set to 1 by user space when its residency snapshotter is ready for the
 * next token: that token's start wakes the reader at once and clears it,
 * so a snapshot follows its token's start by the wakeup's latency rather
 * than the reader's next poll (100 ms), and a run in RAM, whose snapshots
 * back off, is not woken for every token. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} token_wakeup SEC(".maps");

static __always_inline bool ring__token_wakeup_armed(void)
{
	__u32 k = 0;
	__u32 *armed = bpf_map_lookup_elem(&token_wakeup, &k);

	/* Two CPUs may both see it armed: two wakeups, no harm. */
	if (!armed || !*armed)
		return false;
	*armed = 0;
	return true;
}

/* ring__fill_flags wakes the reader for a record nobody waits for only
 * when enough has piled up; the reader also polls on a short deadline. */
static __always_inline __u64 ring__fill_flags(void)
{
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= RB_WAKEUP_BYTES)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

/* Event types that user space must see at once: the process may be
 * stopped waiting for it, or they are rare. The rest wait for the fill
 * level or the reader's poll (ring__fill_flags). */
static __always_inline __u64 ring__wakeup_flags(__u16 type)
{
	if (type == EV_MMAP || type == EV_TASK)
		return BPF_RB_FORCE_WAKEUP;
	/* An exact snapshot holds the process until the recorder has read
	 * the token's start: waiting for the reader's next poll would be
	 * most of the pause. */
	if (type == EV_DECODE_BEGIN && (cfg.stop_at_tokens || ring__token_wakeup_armed()))
		return BPF_RB_FORCE_WAKEUP;
	if (type == EV_EXPERTS && cfg.wake_picks)
		return BPF_RB_FORCE_WAKEUP;
	return ring__fill_flags();
}

static __always_inline void ring__lost(__u32 type)
{
	__u64 *n = bpf_map_lookup_elem(&lost, &type);
	if (n)
		*n += 1;
}

/* ring__reserve takes room for a record whose header the caller writes. */
static __always_inline void *ring__reserve(__u64 size, __u16 type)
{
	void *e = bpf_ringbuf_reserve(&events, size, 0);
	if (!e)
		ring__lost(type);
	return e;
}

static __always_inline void ring__submit(void *e, __u16 type)
{
	bpf_ringbuf_submit(e, ring__wakeup_flags(type));
}

static __always_inline bool proc__is_traced(__u32 tgid)
{
	return bpf_map_lookup_elem(&traced, &tgid) != NULL;
}

/* Stops not taken because the thread was not yet under the warden
 * (proc__stop); one counter, summed over CPUs by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stops_unheld SEC(".maps");

/* Pauses whose SIGSTOP could not be sent (proc__sent). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} stops_unsent SEC(".maps");

/* proc__sent is 1 when a pause's SIGSTOP went out (err 0). The helpers
 * refuse it where their per-CPU work still carries an earlier signal
 * (-EBUSY) or the task is exiting: then nothing holds the process for
 * its attach, and that is counted, not left to look like no pause. */
static __always_inline __u32 proc__sent(long err)
{
	__u32 k = 0;
	__u64 *n;

	if (!err)
		return 1;
	n = bpf_map_lookup_elem(&stops_unsent, &k);
	if (n)
		*n += 1;
	return 0;
}

#define PT_PTRACED 0x00000001

/* proc__stop stops the current thread so that user space attaches probes
 * before it runs on, and releases it when done: 1 when the signal went
 * out. Under iocorr's ptrace warden (its process's leader is ptraced) the
 * SIGSTOP goes to this thread alone, where the warden holds it unseen; a
 * thread the warden has not seized yet (it seizes new threads a drain
 * after they start, rather than stopping every clone) is not stopped at
 * all, and counted: a group stop would be seen by the parent. Without a
 * warden the whole process stops, as its parent may see. */
static __always_inline __u32 proc__stop(void)
{
	/* Not the _btf helper: that needs 5.11, a probe read is 4.8's. */
	struct task_struct *task = (void *)bpf_get_current_task();
	__u32 k = 0;
	__u64 *n;

	if (BPF_CORE_READ(task, ptrace) & PT_PTRACED)
		return proc__sent(bpf_send_signal_thread(SIGSTOP));
	if (BPF_CORE_READ(task, group_leader, ptrace) & PT_PTRACED) {
		n = bpf_map_lookup_elem(&stops_unheld, &k);
		if (n)
			*n += 1;
		return 0;
	}
	return proc__sent(bpf_send_signal(SIGSTOP));
}

/* stamp__fill sets token, phase and op to the stamp of thread tid of
 * process tgid now (an event's, and a fault count's key): its process's token and phase (and its op, --probe
 * ops), or those of the last decoding process when tgid is not traced. */
static __always_inline void stamp__fill(__u32 tgid, __u32 tid, __u32 *token, __u8 *phase, __u32 *op)
{
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	*op = 0;
	if (!ps) {
		*token = last_stamp.token;
		*phase = last_stamp.phase;
		return;
	}
	*token = ps->token;
	*phase = ps->phase;
	if (cfg.probe_ops) {
		__u32 *o = bpf_map_lookup_elem(&cur_op, &tid);
		if (o)
			*op = *o;
	}
}

/* hdr__fill stamps an event of the current thread (stamp__fill, the one
 * place that says what an event's stamp is). */
static __always_inline void hdr__fill(struct event_hdr *h, __u16 type)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;

	h->ts = bpf_ktime_get_ns();
	h->tgid = tgid;
	h->tid = tid;
	h->type = type;
	h->cpu = bpf_get_smp_processor_id();
	h->pad0 = 0;
	stamp__fill(tgid, tid, &h->token, &h->phase, &h->op);
}

/* event__reserve takes room for an event and stamps its header: what
 * every event of the current thread starts with. */
static __always_inline void *event__reserve(__u64 size, __u16 type)
{
	struct event_hdr *h = ring__reserve(size, type);

	if (h)
		hdr__fill(h, type);
	return h;
}

static __always_inline bool file__is_model(__u32 dev, __u64 ino)
{
	struct file_key k = {.ino = ino, .dev = dev};
	return bpf_map_lookup_elem(&files, &k) != NULL;
}

/* file__is_kept says whether events on a file's pages are kept: a model
 * file's whoever causes them, another file's when a traced process does
 * (a model mapped before user space learned it is one is then still
 * covered). */
static __always_inline bool file__is_kept(__u32 dev, __u64 ino)
{
	return file__is_model(dev, ino) || proc__is_traced(bpf_get_current_pid_tgid() >> 32);
}

#endif /* IOCORR_COMMON_BPF_H */
