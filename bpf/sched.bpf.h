/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * --probe sched: context switches and wakeups of traced threads, from which
 * user space draws each thread's states (running, runnable, sleeping,
 * blocked in D state: on I/O). Attached only when asked for: sched_switch
 * fires on every context switch of the machine, traced or not, and the
 * early tgid test is all an untraced switch costs.
 */

static __always_inline struct sched_event *sched__reserve(__u32 kind)
{
	struct sched_event *e = event__reserve(sizeof(*e), EV_SCHED);

	if (!e)
		return NULL;
	e->kind = kind;
	e->pad = 0;
	return e;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
{
	__u32 prev_tgid = BPF_CORE_READ(prev, tgid), next_tgid = BPF_CORE_READ(next, tgid);
	struct sched_event *e;

	if (!proc__is_traced(prev_tgid) && !proc__is_traced(next_tgid))
		return 0;
	e = sched__reserve(SCHEDEV_SWITCH);
	if (!e)
		return 0;
	/* A preempted task stays runnable whatever its state word says. */
	e->prev_state = preempt ? 0 : (__s64)prev_state;
	e->prev_tid = BPF_CORE_READ(prev, pid);
	e->prev_tgid = prev_tgid;
	e->next_tid = BPF_CORE_READ(next, pid);
	e->next_tgid = next_tgid;
	ring__submit(e, EV_SCHED);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(sched_wakeup, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct sched_event *e;

	if (!proc__is_traced(tgid))
		return 0;
	e = sched__reserve(SCHEDEV_WAKEUP);
	if (!e)
		return 0;
	e->prev_state = 0;
	e->prev_tid = BPF_CORE_READ(p, pid);
	e->prev_tgid = tgid;
	e->next_tid = 0;
	e->next_tgid = 0;
	ring__submit(e, EV_SCHED);
	return 0;
}
