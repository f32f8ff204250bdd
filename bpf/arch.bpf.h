/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What differs between the architectures iocorr is built for (bpf2go
 * defines __TARGET_ARCH_x86 or __TARGET_ARCH_arm64 per target). vmlinux.h
 * is x86-64's: kernel structs are relocated by CO-RE on any kernel, but
 * the user registers a uprobe or perf event program sees are each
 * architecture's own uapi layout, and so are a few uapi constants.
 */
#ifndef IOCORR_ARCH_BPF_H
#define IOCORR_ARCH_BPF_H

#if defined(__TARGET_ARCH_arm64)

/* arm64's uapi asm/ptrace.h: what bpf_tracing.h's PT_REGS_* read, and
 * what a perf event program's context starts with. */
struct user_pt_regs {
	__u64 regs[31];
	__u64 sp;
	__u64 pc;
	__u64 pstate;
};

/* A perf event program's context (uapi linux/bpf_perf_event.h) with
 * arm64's registers: vmlinux.h's has x86-64's, whose size would put addr
 * at the wrong offset. */
struct perf_ctx {
	struct user_pt_regs regs;
	__u64 sample_period;
	__u64 addr;
};

/* asm/fcntl.h: arm64 moves O_DIRECT (asm-generic's is x86's). */
#define O_DIRECT_FLAG 0200000

#elif defined(__TARGET_ARCH_x86)

#define perf_ctx bpf_perf_event_data
#define O_DIRECT_FLAG 040000

#else
#error "iocorr's BPF programs are built for x86 and arm64 only"
#endif

#endif /* IOCORR_ARCH_BPF_H */
