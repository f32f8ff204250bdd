/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The traced processes: a process joins `traced` in the fork that makes
 * it, its exec and exit are reported, and its state is dropped when the
 * last thread exits.
 */

/* Threads of iocorr armed to trace the processes they fork (tid → 1).
 * A process joins `traced` in the fork itself, before it runs an
 * instruction: its exec of the launcher and the launcher's own start take
 * faults too, and the kernel counts them in the rusage it reports. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} forkers SEC(".maps");

static __always_inline void task__emit(__u32 kind, __u32 child, __s32 exit_code)
{
	struct task_event *e = event__reserve(sizeof(*e), EV_TASK);

	if (!e)
		return;
	e->kind = kind;
	e->child = child;
	e->exit_code = exit_code;
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	/* A thread start is not rare (node-llama-cpp starts one a token) and
	 * nothing waits for it: the warden seizes threads a rescan delay
	 * after it hears of them. Woken for each, the recorder woke ~400
	 * times a second on the CPUs of a program starting 160 threads a
	 * second (docs/overhead.md, session 14). */
	if (kind == TASKEV_THREAD)
		bpf_ringbuf_submit(e, ring__fill_flags());
	else
		ring__submit(e, EV_TASK);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ptid = BPF_CORE_READ(parent, pid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	struct proc_state ps = {};

	/* Threads share their process's state; only new processes join. A
	 * thread of a process under the warden (its leader ptraced) is told
	 * of, for the warden to seize: it is not stopped at its clone. */
	if (ptgid == ctgid) {
		if (proc__is_traced(ctgid) && (BPF_CORE_READ(parent, group_leader, ptrace) & PT_PTRACED))
			task__emit(TASKEV_THREAD, BPF_CORE_READ(child, pid), 0);
		return 0;
	}
	if (bpf_map_lookup_elem(&forkers, &ptid)) {
		/* The command iocorr starts: no fork event, since its parent is
		 * not traced and user space knows the pid from the fork. */
		bpf_map_update_elem(&traced, &ctgid, &ps, BPF_NOEXIST);
		return 0;
	}
	if (!proc__is_traced(ptgid))
		return 0;
	bpf_map_update_elem(&traced, &ctgid, &ps, BPF_NOEXIST);
	task__emit(TASKEV_FORK, ctgid, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	if (!proc__is_traced(tgid))
		return 0;
	/* A new address space: nothing cached of the old one holds. */
	vma_cache__invalidate(tgid);
	task__emit(TASKEV_EXEC, 0, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	/* Older kernels pass no group_dead (6.1's verifier refuses the
	 * second argument); do_exit() counts signal->live down before this
	 * tracepoint on every kernel, so 0 is the same fact. Two threads
	 * exiting at once may both see 0: a second group exit of a process is
	 * harmless to user space, a missed one would not be. */
	bool group_dead = BPF_CORE_READ(p, signal, live.counter) == 0;

	if (!proc__is_traced(tgid))
		return 0;
	/* Each exiting thread: a fault it began and never finished (a signal
	 * interrupted it) would otherwise go unreported. */
	fault__flush_pending(BPF_CORE_READ(p, pid));
	if (!group_dead)
		return 0;
	task__emit(TASKEV_EXIT, 0, BPF_CORE_READ(p, exit_code));
	bpf_map_delete_elem(&traced, &tgid);
	bpf_map_delete_elem(&vma_caches, &tgid);
	return 0;
}
