//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iocorr.h"

/* Referenced so that bpf2go emits Go types for every event. */
const struct event_hdr *unused_event_hdr __attribute__((unused));
const struct fault_event *unused_fault_event __attribute__((unused));
const struct page_event *unused_page_event __attribute__((unused));
const struct ra_event *unused_ra_event __attribute__((unused));
const struct block_event *unused_block_event __attribute__((unused));
const struct decode_event *unused_decode_event __attribute__((unused));
const struct graph_event *unused_graph_event __attribute__((unused));
const struct node_event *unused_node_event __attribute__((unused));
const struct op_event *unused_op_event __attribute__((unused));
const struct experts_event *unused_experts_event __attribute__((unused));
const struct task_event *unused_task_event __attribute__((unused));
const struct mmap_event *unused_mmap_event __attribute__((unused));
enum event_type unused_event_type __attribute__((unused));
enum phase unused_phase __attribute__((unused));
enum fault_class unused_fault_class __attribute__((unused));
enum ra_kind unused_ra_kind __attribute__((unused));
enum task_kind unused_task_kind __attribute__((unused));

char LICENSE[] SEC("license") = "Dual BSD/GPL";
