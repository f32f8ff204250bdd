/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * User page faults of traced processes: page_fault_user (or, without it,
 * the software page-faults event) begins one and resolves its file, the
 * software major/minor fault events end it with its class.
 * Begin and end are paired by thread in fault_starts.
 *
 * A fault in a model file is a record (fault_event). One outside them
 * (anonymous memory, a file user space found is no model) is counted in
 * fault_counts by thread, stamp and class, with its stall, when
 * cfg.count_faults asks for its kind: node's heap and thread stacks made
 * ~36,000 minor faults a run in RAM, a record each, where every figure
 * read of them was a count or a sum.
 */

/* count_faults of struct config: the faults outside the model files
 * counted in the kernel rather than recorded one by one. */
#define FAULT_COUNT_ANON 1
#define FAULT_COUNT_OTHER 2

struct fault_start {
	__u64 ts;
	__u64 addr;
	__u64 ip;
	__u64 error_code;
	__u64 ino;
	__u64 file_off;
	__u32 dev;
	__u8 where; /* enum fault_where: FAULT_WHERE_MODEL for a record */
	__u8 vma_busy;
	__u8 pad[2];
	__u64 off_since; /* when the thread last went to sleep in it, 0 while it runs */
	__u64 wait_ns;   /* its sleeps so far (fault_switch) */
	__u64 preempted_since; /* when it was last preempted in it, 0 while it runs */
	__u64 preempted_ns;    /* its time preempted so far (fault_switch) */
};

/* Faults begun and not yet accounted, by thread. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct fault_start);
} fault_starts SEC(".maps");

/* A count's key: what a fault_event's header and class would have said,
 * but its time. */
struct fault_count_key {
	__u32 tgid;
	__u32 tid;
	__u32 token;
	__u32 op;
	__u8 phase;
	__u8 class; /* enum fault_class */
	__u8 where; /* enum fault_where */
	__u8 pad;
};

struct fault_count {
	__u64 first_ts; /* the first fault's end */
	__u64 last_ts;  /* the last fault's end */
	__u64 count;
	__u64 stall_ns;
	__u64 wait_ns;
	__u64 preempted_ns;
};

/* Preallocated (perf_event programs may use no other hash map on older
 * kernels): a key is a thread's token, so a run of 1,000 tokens on 8
 * threads in two classes takes 16,000. A fault whose key finds no room is
 * recorded one by one instead: nothing is lost, the run only costs more. */
#define FAULT_COUNT_KEYS 32768

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FAULT_COUNT_KEYS);
	__type(key, struct fault_count_key);
	__type(value, struct fault_count);
} fault_counts SEC(".maps");

/* Files a traced process mapped that user space found are no model (it
 * decides on the mmap record): only their faults are counted as
 * FAULT_WHERE_OTHER. A file not decided yet may be a model that user space
 * has not added to `files` yet, so its faults stay records. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct file_key);
	__type(value, __u8);
} not_models SEC(".maps");

/* fault__where is where the fault at vi (resolved) is counted, or
 * FAULT_WHERE_MODEL when it is recorded: an address the kernel found no
 * file for is anonymous, as user space takes it; one it could not look
 * up is recorded, for user space to resolve. */
static __always_inline __u8 fault__where(struct vma_info *vi)
{
	struct file_key k = {};

	if (!cfg.use_find_vma || !cfg.count_faults || vi->busy)
		return FAULT_WHERE_MODEL;
	if (!vi->ino)
		return (cfg.count_faults & FAULT_COUNT_ANON) ? FAULT_WHERE_ANON : FAULT_WHERE_MODEL;
	if (!(cfg.count_faults & FAULT_COUNT_OTHER))
		return FAULT_WHERE_MODEL;
	k.ino = vi->ino;
	k.dev = vi->dev;
	return bpf_map_lookup_elem(&not_models, &k) ? FAULT_WHERE_OTHER : FAULT_WHERE_MODEL;
}

/* fault__where_cached is where a fault with no start (taken in kernel
 * mode on a user address: copy_to_user into a fresh buffer) is counted,
 * from the process's VMA cache alone: no lock is taken at the fault's end,
 * where the fault handler may hold the mmap lock. A miss, or a model
 * file, is FAULT_WHERE_MODEL: a record, which user space resolves. */
static __always_inline __u8 fault__where_cached(__u32 tgid, __u64 addr)
{
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);
	struct vma_info vi = {.addr = addr};
	struct vma_cache *c;

	if (!ps || !cfg.use_find_vma || !cfg.count_faults)
		return FAULT_WHERE_MODEL;
	c = bpf_map_lookup_elem(&vma_caches, &tgid);
	if (!c || !vma_cache__lookup(c, *(volatile __u64 *)&ps->vma_gen, &vi))
		return FAULT_WHERE_MODEL;
	return fault__where(&vi);
}

/* fault__count adds a fault of thread tid that ended at now, with its
 * stall, to the count of its stamp and class: false when the map has no
 * room for a new key (the caller then records it). Only the thread itself
 * writes its keys, so no two programs race on one. */
static __always_inline bool fault__count(__u32 tid, __u8 class, __u8 where, __u64 now, __u64 stall, __u64 wait, __u64 preempted)
{
	struct fault_count_key k = {.tgid = bpf_get_current_pid_tgid() >> 32, .tid = tid, .class = class, .where = where};
	struct fault_count *v, nv = {};

	stamp__fill(k.tgid, tid, &k.token, &k.phase, &k.op);
	v = bpf_map_lookup_elem(&fault_counts, &k);
	if (v) {
		v->last_ts = now;
		v->count++;
		v->stall_ns += stall;
		v->wait_ns += wait;
		v->preempted_ns += preempted;
		return true;
	}
	nv.first_ts = now;
	nv.last_ts = now;
	nv.count = 1;
	nv.stall_ns = stall;
	nv.wait_ns = wait;
	nv.preempted_ns = preempted;
	return bpf_map_update_elem(&fault_counts, &k, &nv, BPF_NOEXIST) == 0;
}

static __always_inline struct fault_event *fault__reserve(__u8 class)
{
	struct fault_event *e = event__reserve(sizeof(*e), EV_FAULT);

	if (!e)
		return NULL;
	e->class = class;
	e->vma_busy = 0;
	e->pad[0] = e->pad[1] = 0;
	return e;
}

/* fault__set_start puts in e what the fault's beginning saw and resolved;
 * a fault without one (fs NULL) has none of it. */
static __always_inline void fault__set_start(struct fault_event *e, struct fault_start *fs)
{
	if (!fs) {
		e->start_ts = 0;
		e->ip = 0;
		e->error_code = 0;
		e->ino = 0;
		e->dev = 0;
		e->file_off = 0;
		e->wait_ns = 0;
		e->preempted_ns = 0;
		return;
	}
	e->start_ts = fs->ts;
	e->ip = fs->ip;
	e->error_code = fs->error_code;
	e->ino = fs->ino;
	e->dev = fs->dev;
	e->file_off = fs->file_off;
	e->vma_busy = fs->vma_busy;
	e->wait_ns = fs->wait_ns;
	e->preempted_ns = fs->preempted_ns;
}

/* fault__flush_pending reports a thread's fault that began but was never
 * accounted, and forgets it. */
static __always_inline void fault__flush_pending(__u32 tid)
{
	struct fault_start *prev = bpf_map_lookup_elem(&fault_starts, &tid);
	struct fault_event *e;

	if (!prev)
		return;
	if (prev->where != FAULT_WHERE_MODEL &&
	    fault__count(tid, FAULT_UNACCOUNTED, prev->where, bpf_ktime_get_ns(), 0, 0, 0)) {
		bpf_map_delete_elem(&fault_starts, &tid);
		return;
	}
	e = fault__reserve(FAULT_UNACCOUNTED);
	if (e) {
		e->addr = prev->addr;
		fault__set_start(e, prev);
		ring__submit(e, EV_FAULT);
	}
	bpf_map_delete_elem(&fault_starts, &tid);
}

/* fault__begin records the start of a traced thread's user fault at
 * address, and resolves its file while the mapping is certain to be there. */
static __always_inline int fault__begin(__u64 address, __u64 ip, __u64 error_code)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct fault_start fs = {};
	struct vma_info vi = {};
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	if (!ps)
		return 0;
	runs__flush_thread_adds(tid);
	/* A start still pending means the thread's previous fault was never
	 * accounted (a bad access, or one abandoned on a signal): report it
	 * as such rather than dropping it. */
	fault__flush_pending(tid);
	fs.ts = bpf_ktime_get_ns();
	fs.addr = address;
	fs.ip = ip;
	fs.error_code = error_code;
	/* Resolve the file now: after the fault the mapping may be gone, and
	 * this is the exact offset also for mappings that start mid-file. */
	vi.addr = address;
	vma__resolve(tgid, ps, &vi);
	fs.ino = vi.ino;
	fs.dev = vi.dev;
	fs.file_off = vi.file_off;
	fs.vma_busy = vi.busy;
	fs.where = fault__where(&vi);
	bpf_map_update_elem(&fault_starts, &tid, &fs, BPF_ANY);
	return 0;
}

/* fault_switch times a traced thread's time off the CPU inside its
 * faults, from its switch out to its switch back in, in two sums: its
 * sleeps, where it was not preempted (it went to sleep: on the folio lock
 * while the device reads, on reclaim, on the mmap lock), and its time
 * preempted, runnable: the CPU, not the fault, kept it waiting then.
 * Only fault_starts is asked, by thread id, so an untraced switch of the
 * machine costs two lookups that miss; the thread is off its CPU at both,
 * so nothing else writes its start meanwhile. Only the first three
 * arguments are read: prev_state came in 5.18. */
SEC("tp_btf/sched_switch")
int BPF_PROG(fault_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct fault_start *fs;
	__u64 now;
	__u32 tid;

	tid = BPF_CORE_READ(prev, pid);
	fs = bpf_map_lookup_elem(&fault_starts, &tid);
	if (fs) {
		if (preempt)
			fs->preempted_since = bpf_ktime_get_ns();
		else
			fs->off_since = bpf_ktime_get_ns();
	}
	tid = BPF_CORE_READ(next, pid);
	fs = bpf_map_lookup_elem(&fault_starts, &tid);
	if (!fs || !(fs->off_since | fs->preempted_since))
		return 0;
	now = bpf_ktime_get_ns();
	if (fs->off_since && now > fs->off_since)
		fs->wait_ns += now - fs->off_since;
	if (fs->preempted_since && now > fs->preempted_since)
		fs->preempted_ns += now - fs->preempted_since;
	fs->off_since = 0;
	fs->preempted_since = 0;
	return 0;
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(fault_begin, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	return fault__begin(address, PT_REGS_IP_CORE(regs), error_code);
}

/* regs__user_mode says whether the fault was taken in user mode: the
 * page-faults event counts kernel-mode faults on user addresses too
 * (copy_to_user), which page_fault_user does not see. */
static __always_inline bool regs__user_mode(struct perf_ctx *ctx)
{
#if defined(__TARGET_ARCH_x86)
	/* The context allows only whole-register loads: cs is a u64 slot
	 * (a u16 in a union in newer pt_regs). */
	return (*(volatile __u64 *)&ctx->regs.cs & 3) == 3;
#elif defined(__TARGET_ARCH_arm64)
	return (ctx->regs.pstate & 0xf) == 0; /* PSR_MODE_EL0t */
#else
#error "regs__user_mode: unsupported architecture"
#endif
}

/* Where page_fault_user is absent (arm64 has no exceptions tracepoints),
 * the software page-faults event begins the fault: the kernel counts it
 * at the start of its fault handler (do_user_addr_fault, do_page_fault)
 * with the fault's address and registers, before the fault is handled,
 * so the stall is measured the same way. The error code is not there. */
SEC("perf_event")
int fault_begin_perf(struct perf_ctx *ctx)
{
	if (!regs__user_mode(ctx))
		return 0;
	return fault__begin(ctx->addr, PT_REGS_IP(&ctx->regs), 0);
}

/* The software page-fault events are counted when a fault is accounted,
 * at its end (mm_account_fault); with sample_period 1 they give each
 * fault's class and, paired with page_fault_user, its latency. */
static __always_inline int fault__end(struct perf_ctx *ctx, __u8 class)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	/* Read once: the verifier refuses a load through a ctx pointer the
	 * compiler offset to reuse it. */
	__u64 addr = *(volatile __u64 *)&ctx->addr;
	struct fault_start *fs;
	struct fault_event *e;

	if (!proc__is_traced(tgid))
		return 0;
	runs__flush_thread_adds(tid);
	/* A fault taken in kernel mode on a user address (copy_to_user) has
	 * no page_fault_user: no start, so no stall (as its record would
	 * have none), and where it is only if the VMA cache knows; else a
	 * record, which user space resolves by the mappings it saw. */
	fs = bpf_map_lookup_elem(&fault_starts, &tid);
	if (fs && fs->addr != addr)
		fs = NULL;
	if (fs && fs->where != FAULT_WHERE_MODEL) {
		__u64 now = bpf_ktime_get_ns();

		if (fault__count(tid, class, fs->where, now, now >= fs->ts ? now - fs->ts : 0, fs->wait_ns, fs->preempted_ns)) {
			bpf_map_delete_elem(&fault_starts, &tid);
			return 0;
		}
	} else if (!fs) {
		__u8 where = fault__where_cached(tgid, addr);

		if (where != FAULT_WHERE_MODEL && fault__count(tid, class, where, bpf_ktime_get_ns(), 0, 0, 0))
			return 0;
	}
	e = fault__reserve(class);
	if (!e)
		return 0;
	e->addr = addr;
	fault__set_start(e, fs);
	if (fs)
		bpf_map_delete_elem(&fault_starts, &tid);
	ring__submit(e, EV_FAULT);
	return 0;
}

SEC("perf_event")
int fault_major(struct perf_ctx *ctx)
{
	return fault__end(ctx, FAULT_MAJOR);
}

SEC("perf_event")
int fault_minor(struct perf_ctx *ctx)
{
	return fault__end(ctx, FAULT_MINOR);
}
