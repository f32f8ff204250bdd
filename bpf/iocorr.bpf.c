//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iocorr's BPF programs: kernel events that show I/O (faults, page cache,
 * readahead, block requests) and user-space events of llama.cpp/ggml that
 * say which token, graph, op and expert was running. Every event is
 * stamped here, in the kernel, with the token and phase of the process
 * (and the thread's op when op probes are on), so that user space joins
 * by key instead of by guessing from timestamps.
 *
 * One object, one unit: the probe sets live in a .bpf.h each, by
 * subsystem, and are compiled here together, so that bpf2go writes one
 * loader and every program, map and variable keeps one name. iocorr.h is
 * the one definition of every event; common.bpf.h holds what several sets
 * use. Helpers are named noun__verb after the one kernel or target fact
 * each of them reads or writes.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iocorr.h"
#include "arch.bpf.h"
#include "common.bpf.h"

/* In dependency order: each set uses helpers of the ones above it. */
#include "vma.bpf.h"
#include "pagecache.bpf.h"
#include "readahead.bpf.h"
#include "faults.bpf.h"
#include "block.bpf.h"
#include "proc.bpf.h"
#include "llama.bpf.h"
#include "ggml.bpf.h"
#include "reads.bpf.h"
#include "sched.bpf.h"

/* Referenced so that the object's BTF, from which internal/wiregen writes
 * the wire package's Go types, holds every struct and enum of iocorr.h
 * (wiregen refuses one missing). */
const struct fault_event *unused_fault_event __attribute__((unused));
const struct fault_count_event *unused_fault_count_event __attribute__((unused));
const struct page_event *unused_page_event __attribute__((unused));
const struct page_run_event *unused_page_run_event __attribute__((unused));
const struct ra_event *unused_ra_event __attribute__((unused));
const struct block_event *unused_block_event __attribute__((unused));
const struct decode_event *unused_decode_event __attribute__((unused));
const struct graph_event *unused_graph_event __attribute__((unused));
const struct node_event *unused_node_event __attribute__((unused));
const struct op_event *unused_op_event __attribute__((unused));
const struct experts_event *unused_experts_event __attribute__((unused));
const struct place_event *unused_place_event __attribute__((unused));
const struct bufname_event *unused_bufname_event __attribute__((unused));
const struct graph_end_event *unused_graph_end_event __attribute__((unused));
const struct task_event *unused_task_event __attribute__((unused));
const struct mmap_event *unused_mmap_event __attribute__((unused));
const struct munmap_event *unused_munmap_event __attribute__((unused));
const struct sched_event *unused_sched_event __attribute__((unused));
const struct read_event *unused_read_event __attribute__((unused));
enum event_type unused_event_type __attribute__((unused));
enum phase unused_phase __attribute__((unused));
enum block_completion unused_block_completion __attribute__((unused));
enum fault_class unused_fault_class __attribute__((unused));
enum fault_where unused_fault_where __attribute__((unused));
enum ra_kind unused_ra_kind __attribute__((unused));
enum task_kind unused_task_kind __attribute__((unused));
enum sched_kind unused_sched_kind __attribute__((unused));
enum read_kind unused_read_kind __attribute__((unused));
enum seq_state unused_seq_state __attribute__((unused));

char LICENSE[] SEC("license") = "Dual BSD/GPL";
