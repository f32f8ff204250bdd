/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Events that iocorr's BPF programs put in the ring buffer. This header is
 * the only definition: bpf2go generates the Go types from it, and the
 * spool on disk holds these records byte for byte.
 *
 * Every record starts with struct event_hdr. Fields are ordered so that
 * no record has implicit padding: the Go twin is then exactly the C layout.
 */
#ifndef IOCORR_H
#define IOCORR_H

#define IOCORR_NAME_LEN 64
/* expert ids carried by one experts event: n_expert_used * n_tokens of a
 * decode step fits easily; a long prefill batch is split over several
 * events (see experts_event.first). */
#define IOCORR_MAX_EXPERT_IDS 128

enum event_type {
	EV_FAULT = 1,         /* user page fault, completed: struct fault_event */
	EV_FILEMAP_FAULT = 2, /* filemap:mm_filemap_fault: struct page_event */
	EV_PAGE_ADD = 3,      /* filemap:mm_filemap_add_to_page_cache: struct page_event */
	EV_PAGE_DEL = 4,      /* filemap:mm_filemap_delete_from_page_cache: struct page_event */
	EV_READAHEAD = 5,     /* readahead:*: struct ra_event */
	EV_BLOCK = 6,         /* block request completed: struct block_event */
	EV_DECODE_BEGIN = 7,  /* llama_decode entry: struct decode_event */
	EV_DECODE_END = 8,    /* llama_decode return: struct decode_event */
	EV_GRAPH = 9,         /* ggml_graph_compute entry: struct graph_event */
	EV_NODE = 10,         /* a weight-reading node of a graph seen first: struct node_event */
	EV_OP = 11,           /* ggml_compute_forward_* entry, thread 0: struct op_event */
	EV_EXPERTS = 12,      /* selected expert ids: struct experts_event */
	EV_TASK = 13,         /* fork, exec, exit of a traced task: struct task_event */
	EV_MMAP = 14,         /* a traced process mapped a file: struct mmap_event */
	EV_READ = 15,         /* a read syscall or io_uring read of a model file returned: struct read_event */
	EV_SCHED = 16,        /* a traced thread switched in or out, or woken (--probe sched): struct sched_event */
	EV_PAGE_RUN = 17,     /* contiguous page-cache adds or deletions: struct page_run_event */
	EV_PLACE = 18,        /* ggml_backend_tensor_set from a file mapping: struct place_event */
	EV_BUFNAME = 19,      /* ggml_backend_buffer_name returned: struct bufname_event */
	EV_GRAPH_END = 20,    /* ggml_graph_compute return: struct graph_end_event */
	EV_FAULT_COUNT = 21,  /* faults outside the model files counted in the kernel: struct fault_count_event */
	EV_MUNMAP = 22,       /* a traced process unmapped a range: struct munmap_event */
	EV_TYPE_MAX = 23,
};

enum phase {
	PHASE_NONE = 0,    /* before the first llama_decode */
	PHASE_PREFILL = 1, /* the batch carries more than one token */
	PHASE_DECODE = 2,  /* one token per batch */
};

enum fault_class {
	FAULT_MINOR = 0,
	FAULT_MAJOR = 1,
	/* the fault began but no completion was counted (the access was bad,
	 * or the fault was retried and accounted elsewhere) */
	FAULT_UNACCOUNTED = 2,
};

/* Where a fault was, when it was counted in the kernel rather than
 * recorded one by one (struct fault_count_event). */
enum fault_where {
	FAULT_WHERE_MODEL = 0, /* a model file, or not known: recorded one by one */
	FAULT_WHERE_ANON = 1,  /* no file (anonymous memory, or no mapping at all) */
	FAULT_WHERE_OTHER = 2, /* a file that user space found is no model */
};

enum ra_kind {
	RA_SYNC = 1,
	RA_ASYNC = 2,
	RA_UNBOUNDED = 3,
	RA_ORDER = 4,
};

enum task_kind {
	TASKEV_FORK = 1,
	TASKEV_EXEC = 2,
	TASKEV_EXIT = 3,
	TASKEV_THREAD = 4, /* a thread started in a process under the warden */
};

struct event_hdr {
	__u64 ts;     /* bpf_ktime_get_ns (CLOCK_MONOTONIC) */
	__u32 tgid;   /* current task; for block events often a kworker */
	__u32 tid;
	__u32 token;  /* llama_decode sequence number of the traced process, from 1; 0 before */
	__u32 op;     /* current op of the thread (op event seq, op probes), 0 = unknown */
	__u16 type;   /* enum event_type */
	__u8 phase;   /* enum phase of the token */
	__u8 pad0;
	__u32 cpu;
};

struct fault_event {
	struct event_hdr hdr; /* hdr.ts is the completion time */
	__u64 start_ts;       /* exceptions:page_fault_user */
	__u64 addr;
	__u64 ip;
	__u64 ino;      /* file of the VMA at fault time, 0 if anonymous */
	__u64 file_off; /* byte offset in that file, resolved in the kernel */
	__u64 error_code;
	__u32 dev;      /* kernel encoding: major << 20 | minor */
	__u8 class;     /* enum fault_class */
	/* 1 when the kernel could not look the address up (bpf_find_vma found
	 * the mmap lock held): ino is 0, and user space resolves addr from
	 * the mappings it knows. */
	__u8 vma_busy;
	__u8 pad[2];
	/* The time the thread slept off the CPU between start_ts and hdr.ts,
	 * switched out other than by preemption (faults.bpf.h's fault_switch):
	 * the fault's wait, on the device or on a lock; the rest of the stall
	 * is preempted_ns and the kernel's work on the CPU. 0 without a start, and where
	 * fault_switch is not attached (the "fault wait" capability). */
	__u64 wait_ns;
	/* The time the thread spent preempted between start_ts and hdr.ts:
	 * runnable, off the CPU from a switch out by preemption to its switch
	 * back in. Neither the fault's wait nor the kernel's work. 0 where
	 * wait_ns is. */
	__u64 preempted_ns;
};

/* The faults outside the model files of one thread with one stamp (token,
 * phase, op) and one class, counted in the kernel (faults.bpf.h's
 * fault_counts) instead of a fault_event each: user space writes one such
 * record per count into the spool at the run's end, after the ring's last
 * record. The figures fault_events would have given per token, tensor
 * (the [anonymous] and [other file] pseudo tensors) and op are the same;
 * each fault's address, time and stall alone are not kept. */
struct fault_count_event {
	struct event_hdr hdr; /* the faults' thread and stamp; hdr.ts: the last one's end */
	__u64 first_ts;       /* the first one's end */
	__u64 count;
	__u64 stall_ns;       /* summed end - start, as each fault_event's */
	__u64 wait_ns;        /* summed wait_ns, as each fault_event's */
	__u64 preempted_ns;   /* summed preempted_ns, as each fault_event's */
	__u8 class;           /* enum fault_class */
	__u8 where;           /* enum fault_where: FAULT_WHERE_ANON or _OTHER */
	__u8 pad[6];
};

struct page_event {
	struct event_hdr hdr;
	__u64 ino;
	__u64 index; /* page index in the file */
	__u64 pfn;
	__u32 dev;
	__u32 order; /* folio order: the event covers 1 << order pages */
};

/* A run of page-cache adds (or deletions) that the kernel saw one folio
 * after another: one file, ascending pages within a window of
 * IOCORR_RUN_PAGES (readahead skips pages still cached, reclaim skips
 * pages still in use: a run may have holes), or any number of contiguous
 * pages; one thread, one token, phase and op stamp. It stands for the
 * nr_folios page_event records of its folios, and is flushed when the next
 * folio does not extend it, when its thread's fault begins or ends, at a
 * token boundary, and before any event on one of its pages elsewhere, so
 * that no add and delete of a page are ever reordered. */
#define IOCORR_RUN_PAGES 512
struct page_run_event {
	struct event_hdr hdr; /* the run's thread and stamp; hdr.ts: its last folio */
	__u64 ino;
	__u64 index;     /* first page in the file */
	__u64 first_ts;  /* its first folio */
	__u32 dev;
	__u16 kind;      /* EV_PAGE_ADD or EV_PAGE_DEL */
	__u16 pad;
	__u32 nr_pages;  /* pages in the run */
	__u32 span;      /* they lie in [index, index + span) */
	__u32 nr_folios; /* folios (tracepoint hits) in the run */
	__u32 pad2;
	/* When nr_pages < span (holes; span <= IOCORR_RUN_PAGES): bit i of
	 * pages[i / 64] is set when page index + i is in the run. When
	 * nr_pages == span the run is every page of the span. The record
	 * ends after the words the span needs: none without holes. */
	__u64 pages[IOCORR_RUN_PAGES / 64];
};

struct ra_event {
	struct event_hdr hdr;
	__u64 ino;
	__u64 index;
	__u64 nr_pages;   /* size of the readahead window, in pages */
	__u32 dev;
	__u32 kind;       /* enum ra_kind */
	__u32 async_size;
	__u32 ra_pages;
	__u32 mmap_miss;
	__u32 order;
};

/* block_event.error for a request whose completion BPF never saw: no
 * blk_status_t is negative. */
enum block_completion {
	BLOCK_COMPLETION_UNSEEN = -1,
};

struct block_event {
	struct event_hdr hdr; /* hdr.ts is the completion time */
	__u64 issue_ts;
	__u64 sector;    /* 512-byte sectors from the start of the device */
	__u32 dev;
	__u32 bytes;     /* request size at issue */
	__u32 cmd_flags; /* REQ_OP_* in the low bits */
	__s32 error;     /* blk_status_t at completion, or BLOCK_COMPLETION_UNSEEN */
};

/* Sequences whose tokens decode_event.seq_tokens counts. */
#define SEQ_COUNTED 8

struct decode_event {
	struct event_hdr hdr;
	__u64 ctx;      /* llama_context pointer */
	__u64 begin_ts; /* entry time, set on both events */
	__s32 n_tokens; /* batch.n_tokens */
	__s32 ret;      /* return value, EV_DECODE_END only */
	__u64 op_hits;  /* op-probe hits of the process so far, every thread (--probe ops) */
	/* EV_DECODE_BEGIN: the sequence ids of the batch's tokens (llama-server
	 * runs a request per sequence), bit s for sequence s < 64; seq_state
	 * says what the set leaves out (enum seq_state bits). */
	__u64 seqs;
	__u32 seq_state;
	__u32 pad;
	/* EV_DECODE_BEGIN: how many of the batch's tokens serve sequence s,
	 * for s < SEQ_COUNTED (a token of several sequences counts in each):
	 * what a batch shared by requests is split by. SEQ_UNCOUNTED in
	 * seq_state when a sequence of the set is past them. */
	__u16 seq_tokens[SEQ_COUNTED];
};

/* decode_event.seq_state bits: 0 is a complete set. */
enum seq_state {
	SEQ_READ = 1,     /* the batch was read (else the set is unknown) */
	SEQ_WIDE = 2,     /* a sequence id outside 0..63: not in seqs */
	SEQ_PARTIAL = 4,  /* tokens or ids past the read bound: not in seqs */
	SEQ_DEFAULT = 8,  /* batch.seq_id is NULL: llama.cpp runs it as sequence 0 */
	SEQ_UNCOUNTED = 16, /* a sequence of the set is past SEQ_COUNTED: seq_tokens leaves it out */
};

struct graph_event {
	struct event_hdr hdr;
	__u64 cgraph;
	__u64 graph_id; /* hash of the nodes and weights; EV_NODE refers to it */
	__u32 n_nodes;
	__u32 n_weight_nodes;
	__u32 seq;      /* graph computations of this process, from 1 */
	__u32 is_new;   /* 1 when this graph's EV_NODE records follow */
	__u32 file;     /* the probed file that computed it (the attach cookie) */
	/* 1 when the kernel stopped the process (SIGSTOP) because --probe ops
	 * waits for the first graph of this file: user space attaches the op
	 * probes to the one CPU backend that runs, then sends SIGCONT. */
	__u32 stopped;
};

struct node_event {
	struct event_hdr hdr;
	__u64 graph_id;
	__u64 node;        /* ggml_tensor pointer of the node */
	__u64 weight;      /* ggml_tensor pointer of the weight */
	__u64 weight_data; /* its data pointer */
	__u64 weight_ne[4];
	__u64 weight_nb[4];
	__u64 ino;         /* the file that holds weight_data, resolved in the kernel */
	__u64 file_off;
	__u64 weight_buffer; /* its ggml_backend_buffer pointer (tensor->buffer) */
	__u32 dev;
	__u32 node_idx;
	__u32 op;          /* enum ggml_op value of the target's ggml */
	__u32 weight_type; /* enum ggml_type */
	__u32 src_slot;    /* which src[] of the node the weight is */
	__u32 vma_busy;    /* as fault_event's: weight_data is resolved in user space */
	char node_name[IOCORR_NAME_LEN];
	char weight_name[IOCORR_NAME_LEN];
};

/* A weight copied into a backend's buffer while the model loads: llama.cpp
 * calls ggml_backend_tensor_set(tensor, data, offset, size) with data in
 * the model's mapping for every tensor it does not leave mapped. */
struct place_event {
	struct event_hdr hdr;
	__u64 tensor;
	__u64 buffer;   /* tensor->buffer */
	__u64 data;     /* the source */
	__u64 size;
	__u64 ino;      /* the file that holds data */
	__u64 file_off;
	__u32 dev;
	__u32 vma_busy; /* as fault_event's: data is resolved in user space */
	char name[IOCORR_NAME_LEN];
};

/* A ggml_graph_compute call returned: the CPU backend computed one graph
 * (with a GPU backend, one split of a token's graph) from begin_ts to the
 * header's ts, on the header's thread. */
struct graph_end_event {
	struct event_hdr hdr;
	__u64 graph_id;
	__u64 begin_ts;
	__u32 seq; /* the graph_event's */
	__u32 pad;
};

/* A backend buffer's name, as ggml_backend_buffer_name returned it
 * (llama.cpp asks for each model buffer's while loading: "CPU_Mapped",
 * "Vulkan0", "CUDA0", ...). */
struct bufname_event {
	struct event_hdr hdr;
	__u64 buffer;
	char name[IOCORR_NAME_LEN];
};

struct op_event {
	struct event_hdr hdr; /* hdr.op is this op's own sequence number */
	__u64 node;          /* dst ggml_tensor */
	__u32 fn;            /* index of the probed function (the attach cookie) */
	__u32 op;            /* dst->op */
	char name[IOCORR_NAME_LEN];
};

struct experts_event {
	struct event_hdr hdr;
	__u64 tensor;   /* the I32 ids tensor */
	__u32 n_used;   /* ne[0]: experts per token */
	__u32 n_tokens; /* ne[1] */
	__u32 first;    /* index of ids[0] in the whole tensor */
	__u32 count;    /* valid entries in ids */
	char name[IOCORR_NAME_LEN]; /* the consuming node's name, e.g. ffn_moe_weights-5 */
	__s32 ids[IOCORR_MAX_EXPERT_IDS];
};

struct task_event {
	struct event_hdr hdr;
	__u32 kind;   /* enum task_kind */
	__u32 child;  /* new pid (fork) */
	__s32 exit_code;
	__u32 pad;
	char comm[16];
};

struct mmap_event {
	struct event_hdr hdr;
	__u64 start;
	__u64 end;
	__u64 pgoff; /* in pages */
	__u64 ino;
	__u64 vm_flags;
	__u32 dev;
	/* 1 when the kernel stopped the process (SIGSTOP) because it mapped
	 * an executable file not seen before: user space attaches uprobes to
	 * that file, then sends SIGCONT, so no call is missed. */
	__u32 stopped;
};

/* A munmap call of a traced process that returned 0: [start, end) is
 * unmapped whole (end page-rounded, as the kernel rounds it). The mappings
 * user space keeps for faults it resolves itself (no bpf_find_vma, or the
 * mmap lock held) would otherwise keep a file where anonymous memory
 * reuses the range: llama.cpp unmaps the parts of a model's mapping that
 * went to a GPU once they are copied. */
struct munmap_event {
	struct event_hdr hdr;
	__u64 start;
	__u64 end;
};

enum read_kind {
	READ_READ = 1,
	READ_PREAD64 = 2,
	READ_READV = 3,
	READ_PREADV = 4,
	READ_PREADV2 = 5,
	READ_IO_URING = 6, /* IORING_OP_READ, _READV or _READ_FIXED */
};

/* hdr is the reader at the call (for io_uring, the submitter): its token,
 * phase and op; hdr.ts is the return (the completion for io_uring). */
struct read_event {
	struct event_hdr hdr;
	__u64 start_ts; /* the call's entry (io_uring: the submission) */
	__u64 ino;
	__u64 offset;   /* file offset of the first byte read */
	__u64 bytes;    /* bytes read: the return value (the CQE's res) */
	__u32 dev;
	__u16 kind;     /* enum read_kind */
	__u16 direct;   /* 1 when the file was opened O_DIRECT */
};

enum sched_kind {
	SCHEDEV_SWITCH = 1, /* sched_switch: prev leaves the CPU, next takes it */
	SCHEDEV_WAKEUP = 2, /* sched_wakeup: target becomes runnable */
};

/* hdr is the current task: for a switch the CPU's, for a wakeup the
 * waker. A switch is recorded when prev or next is traced, a wakeup when
 * the woken task is. */
struct sched_event {
	struct event_hdr hdr;
	__s64 prev_state; /* the state prev leaves in: 0 runnable (preempted), TASK_* bits otherwise */
	__u32 kind;       /* enum sched_kind */
	__u32 prev_tid;   /* switch: the task leaving; wakeup: the woken task */
	__u32 prev_tgid;
	__u32 next_tid; /* switch: the task taking the CPU */
	__u32 next_tgid;
	__u32 pad;
};

#endif /* IOCORR_H */
