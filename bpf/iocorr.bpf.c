//go:build ignore

// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * iocorr's BPF programs: kernel events that show I/O (faults, page cache,
 * readahead, block requests) and user-space events of llama.cpp/ggml that
 * say which token, graph, op and expert was running. Every event is
 * stamped here, in the kernel, with the token and phase of the process
 * (and the thread's op when op probes are on), so that user space joins
 * by key instead of by guessing from timestamps.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "iocorr.h"

#define SIGSTOP 19
#define VM_EXEC 0x00000004
#define EINVAL_ADDR_MAX (-4095UL)
#define GGML_MAX_SRC 10
#define MAX_GRAPH_NODES 65536
#define RB_WAKEUP_BYTES (512 * 1024)

/* Filters and the ggml layout, fixed at load time by user space. */
const volatile __u32 self_tgid = 0;
const volatile bool probe_ops = false;
/* When set, block requests are kept only for devices in `devs`; otherwise
 * for every device (the model's device may not be known before the child
 * maps it), and user space sorts them out by extents. */
const volatile bool filter_devs = false;
/* log2 of the page size, from user space (os.Getpagesize): vm_pgoff and
 * page-cache indexes count pages of this size. */
const volatile __u32 page_shift = 0;

/* struct ggml_tensor and struct ggml_cgraph offsets of the target build.
 * Not const: user space learns them per library (DWARF, when a library
 * that is dlopen()ed later has it) after the programs are loaded, and
 * sets them before it attaches the uprobes that read them. */
struct ggml_layout {
	__u32 t_type;
	__u32 t_ne;
	__u32 t_nb;
	__u32 t_op;
	__u32 t_src;
	__u32 t_view_src;
	__u32 t_data;
	__u32 t_name;
	__u32 g_n_nodes;
	__u32 g_nodes;
	__u32 type_i32; /* enum ggml_type GGML_TYPE_I32 */
	__u32 pad;
};
volatile struct ggml_layout layout = {
	.t_type = 0, .t_ne = 16, .t_nb = 48, .t_op = 80, .t_src = 152, .t_view_src = 232,
	.t_data = 248, .t_name = 256, .g_n_nodes = 4, .g_nodes = 16, .type_i32 = 26,
};
#define t_type layout.t_type
#define t_ne layout.t_ne
#define t_nb layout.t_nb
#define t_op layout.t_op
#define t_src layout.t_src
#define t_data layout.t_data
#define t_name layout.t_name
#define g_n_nodes layout.g_n_nodes
#define g_nodes layout.g_nodes
#define ggml_type_i32 layout.type_i32

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

struct fault_start {
	__u64 ts;
	__u64 addr;
	__u64 ip;
	__u64 error_code;
	__u64 ino;
	__u64 file_off;
	__u32 dev;
	__u32 pad;
};

struct blk_start {
	__u64 ts;
	__u64 sector;
	__u32 dev;
	__u32 bytes;
	__u32 cmd_flags;
	__u32 pad;
};

struct decode_start {
	__u64 ts;
	__u64 ctx;
	__s32 n_tokens;
	__s32 pad;
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

/* Model files: their page-cache and readahead events are kept whoever
 * causes them (evictions run in kswapd or other tasks). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct file_key);
	__type(value, __u8);
} files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} devs SEC(".maps");

/* Executable files already reported, so a process is stopped once per
 * file for uprobe attachment. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct file_key);
	__type(value, __u8);
} seen_exec SEC(".maps");

/* Entry/exit pairs, keyed by thread (faults, decode) or request. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct fault_start);
} fault_starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct blk_start);
} blk_starts SEC(".maps");

/* Files (graph_compute attach cookies) whose op probes wait for their
 * first graph: 1 waiting, 2 the process was stopped for the attach. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);
	__type(value, __u32);
} ops_pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct decode_start);
} decode_starts SEC(".maps");

/* Thread → op sequence number of the op it is running (op probes). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u32);
} cur_op SEC(".maps");

/* Graph fingerprints whose nodes were already emitted. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __u8);
} graphs_seen SEC(".maps");

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

/* ---- page faults ------------------------------------------------------ */

/* Pending page-cache runs (see "page-cache runs" below) that faults and
 * token boundaries put in the ring. */
static __always_inline void flush_thread_adds(__u32 tid);
static __always_inline void flush_all_runs(void);

struct vma_info {
	__u64 addr;
	__u64 ino;
	__u64 file_off;
	__u64 start;
	__u64 end;
	__u64 pgoff;
	__u64 flags;
	__u32 dev;
	__u32 found;
};

/* file_offset is the byte of the file that addr maps to in a mapping that
 * starts at vm_start with page offset vm_pgoff (mid-file mappings too). */
static __always_inline __u64 file_offset(__u64 addr, __u64 vm_start, __u64 vm_pgoff)
{
	return addr - vm_start + (vm_pgoff << page_shift);
}

static long vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct vma_info *vi = data;
	struct file *f = BPF_CORE_READ(vma, vm_file);

	vi->found = 1;
	vi->start = BPF_CORE_READ(vma, vm_start);
	vi->end = BPF_CORE_READ(vma, vm_end);
	vi->pgoff = BPF_CORE_READ(vma, vm_pgoff);
	vi->flags = BPF_CORE_READ(vma, vm_flags);
	if (!f)
		return 0;
	vi->ino = BPF_CORE_READ(f, f_inode, i_ino);
	vi->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	vi->file_off = file_offset(vi->addr, vi->start, vi->pgoff);
	return 0;
}

/* ---- the VMA cache ----------------------------------------------------- */

/*
 * bpf_find_vma costs microseconds per fault (it takes the mmap lock and
 * walks the maple tree); a process faults on a handful of mappings over and
 * over. So each traced process keeps its last VMA_SLOTS mappings (start,
 * end, page offset, file) stamped with its vma_gen. Every syscall that
 * changes mappings (mmap, munmap, mremap, brk, shmat, shmdt,
 * remap_file_pages, exec) bumps vma_gen when it enters and when it
 * returns, so an entry is trusted only if no such call began or ended
 * since the lookup that filled it: the kernel changes a mapping only
 * inside such a call, and a split or merge by mprotect keeps every
 * address's file offset. A miss falls back to bpf_find_vma.
 */
#define VMA_SLOTS 8

struct vma_slot {
	__u64 start;
	__u64 end;
	__u64 pgoff;
	__u64 ino; /* 0: anonymous */
	__u64 gen;
	__u32 dev;
	__u32 pad;
};

struct vma_cache {
	struct vma_slot s[VMA_SLOTS];
	__u32 next;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32); /* tgid */
	__type(value, struct vma_cache);
} vma_caches SEC(".maps");

/* A zeroed cache to insert from: it is too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct vma_cache);
} vma_zero SEC(".maps");

/* vma_lookup fills vi from the cache: false on a miss. */
static __always_inline bool vma_lookup(struct vma_cache *c, __u64 gen, struct vma_info *vi)
{
#pragma unroll
	for (int i = 0; i < VMA_SLOTS; i++) {
		struct vma_slot *s = &c->s[i];
		if (s->gen == gen && s->start <= vi->addr && vi->addr < s->end) {
			vi->found = 1;
			vi->start = s->start;
			vi->end = s->end;
			vi->pgoff = s->pgoff;
			vi->ino = s->ino;
			vi->dev = s->dev;
			if (s->ino)
				vi->file_off = file_offset(vi->addr, s->start, s->pgoff);
			return true;
		}
	}
	return false;
}

static __always_inline void vma_remember(struct vma_cache *c, __u64 gen, struct vma_info *vi)
{
	__u32 i = c->next % VMA_SLOTS;
	struct vma_slot *s;

	if (i >= VMA_SLOTS)
		return;
	s = &c->s[i];
	s->start = vi->start;
	s->end = vi->end;
	s->pgoff = vi->pgoff;
	s->ino = vi->ino;
	s->dev = vi->dev;
	s->gen = gen;
	c->next = i + 1;
}

/* vma_resolve finds the mapping of vi->addr of the current process. */
static __always_inline void vma_resolve(__u32 tgid, struct proc_state *ps, struct vma_info *vi)
{
	struct vma_cache *c = bpf_map_lookup_elem(&vma_caches, &tgid);
	__u64 gen = *(volatile __u64 *)&ps->vma_gen;

	if (c && vma_lookup(c, gen, vi))
		return;
	bpf_find_vma(bpf_get_current_task_btf(), vi->addr, vma_cb, vi, 0);
	if (!vi->found)
		return;
	if (!c) {
		__u32 k = 0;
		struct vma_cache *zero = bpf_map_lookup_elem(&vma_zero, &k);

		if (!zero)
			return;
		bpf_map_update_elem(&vma_caches, &tgid, zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&vma_caches, &tgid);
		if (!c)
			return;
	}
	vma_remember(c, gen, vi);
}

/* vma_changing marks the current process's cached mappings stale. */
static __always_inline void vma_changing(__u32 tgid)
{
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	if (ps)
		__sync_fetch_and_add(&ps->vma_gen, 1);
}

static __always_inline int vma_syscall(void)
{
	vma_changing(bpf_get_current_pid_tgid() >> 32);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int vma_enter_mmap(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_enter_munmap")
int vma_enter_munmap(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_exit_munmap")
int vma_exit_munmap(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_enter_mremap")
int vma_enter_mremap(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_exit_mremap")
int vma_exit_mremap(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_enter_brk")
int vma_enter_brk(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_exit_brk")
int vma_exit_brk(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_enter_shmat")
int vma_enter_shmat(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_exit_shmat")
int vma_exit_shmat(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_enter_shmdt")
int vma_enter_shmdt(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_exit_shmdt")
int vma_exit_shmdt(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_enter_remap_file_pages")
int vma_enter_remap(void *ctx) { return vma_syscall(); }
SEC("tracepoint/syscalls/sys_exit_remap_file_pages")
int vma_exit_remap(void *ctx) { return vma_syscall(); }

/* flush_pending_fault reports a thread's fault that began but was never
 * accounted, and forgets it. */
static __always_inline void flush_pending_fault(__u32 tid)
{
	struct fault_start *prev = bpf_map_lookup_elem(&fault_starts, &tid);
	struct fault_event *e;

	if (!prev)
		return;
	e = reserve(sizeof(*e), EV_FAULT);
	if (e) {
		fill_hdr(&e->hdr, EV_FAULT);
		e->start_ts = prev->ts;
		e->addr = prev->addr;
		e->ip = prev->ip;
		e->error_code = prev->error_code;
		e->ino = prev->ino;
		e->dev = prev->dev;
		e->file_off = prev->file_off;
		e->class = FAULT_UNACCOUNTED;
		e->pad[0] = e->pad[1] = e->pad[2] = 0;
		submit(e, EV_FAULT);
	}
	bpf_map_delete_elem(&fault_starts, &tid);
}

SEC("tp_btf/page_fault_user")
int BPF_PROG(fault_begin, unsigned long address, struct pt_regs *regs, unsigned long error_code)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct fault_start fs = {};
	struct vma_info vi = {};
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	if (!ps)
		return 0;
	flush_thread_adds(tid);
	/* A start still pending means the thread's previous fault was never
	 * accounted (a bad access, or one abandoned on a signal): report it
	 * as such rather than dropping it. */
	flush_pending_fault(tid);
	fs.ts = bpf_ktime_get_ns();
	fs.addr = address;
	fs.ip = BPF_CORE_READ(regs, ip);
	fs.error_code = error_code;
	/* Resolve the file now: after the fault the mapping may be gone, and
	 * this is the exact offset also for mappings that start mid-file. */
	vi.addr = address;
	vma_resolve(tgid, ps, &vi);
	fs.ino = vi.ino;
	fs.dev = vi.dev;
	fs.file_off = vi.file_off;
	bpf_map_update_elem(&fault_starts, &tid, &fs, BPF_ANY);
	return 0;
}

/* The software page-fault events are counted when a fault is accounted,
 * at its end (mm_account_fault); with sample_period 1 they give each
 * fault's class and, paired with page_fault_user, its latency. */
static __always_inline int fault_end(struct bpf_perf_event_data *ctx, __u8 class)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct fault_start *fs;
	struct fault_event *e;

	if (!is_traced(tgid))
		return 0;
	flush_thread_adds(tid);
	e = reserve(sizeof(*e), EV_FAULT);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_FAULT);
	e->addr = ctx->addr;
	e->class = class;
	e->pad[0] = e->pad[1] = e->pad[2] = 0;
	fs = bpf_map_lookup_elem(&fault_starts, &tid);
	if (fs && fs->addr == ctx->addr) {
		e->start_ts = fs->ts;
		e->ip = fs->ip;
		e->error_code = fs->error_code;
		e->ino = fs->ino;
		e->dev = fs->dev;
		e->file_off = fs->file_off;
		bpf_map_delete_elem(&fault_starts, &tid);
	} else {
		/* A fault taken in kernel mode on a user address (copy_to_user)
		 * has no page_fault_user: no start, no file resolution here. */
		e->start_ts = 0;
		e->ip = 0;
		e->error_code = 0;
		e->ino = 0;
		e->dev = 0;
		e->file_off = 0;
	}
	submit(e, EV_FAULT);
	return 0;
}

SEC("perf_event")
int fault_major(struct bpf_perf_event_data *ctx)
{
	return fault_end(ctx, FAULT_MAJOR);
}

SEC("perf_event")
int fault_minor(struct bpf_perf_event_data *ctx)
{
	return fault_end(ctx, FAULT_MINOR);
}

/* ---- page cache and readahead ---------------------------------------- */

static __always_inline bool is_model_file(__u32 dev, __u64 ino)
{
	struct file_key k = {.ino = ino, .dev = dev};
	return bpf_map_lookup_elem(&files, &k) != NULL;
}

static __always_inline int page_event(__u16 type, __u32 dev, __u64 ino, __u64 index, __u64 pfn, __u32 order,
				      bool by_pid)
{
	struct page_event *e;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	/* A model file's pages whoever touches them; other files' pages only
	 * when a traced process brought them in (a model mapped before user
	 * space learned it is one is then still covered). */
	if (!is_model_file(dev, ino) && !(by_pid && is_traced(tgid)))
		return 0;
	e = reserve(sizeof(*e), type);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, type);
	e->ino = ino;
	e->index = index;
	e->pfn = pfn;
	e->dev = dev;
	e->order = order;
	submit(e, type);
	return 0;
}

/* ---- page-cache runs ------------------------------------------------- */

/*
 * Page-cache adds and deletions come in long runs of contiguous folios
 * (readahead windows, reclaim batches): one EV_PAGE_RUN record stands for
 * a run, instead of one record per folio. A pending run lives in a slot
 * (RUN_WAYS per CPU; CPUs beyond RUN_CPUS share) and is extended
 * while the next folio continues it: same kind, file, thread and stamp,
 * the next index, or a later one in the run's window of IOCORR_RUN_PAGES
 * (a window records its pages in a bitmap).
 *
 * Order. Residency is replayed from these records, so an add and a delete
 * of one page must never trade places, yet a run may sit in a slot while
 * another CPU touches one of its pages. The kernel orders the two events
 * of a page: a folio is added locked and can be deleted only once its read
 * has finished and it was unlocked, long after the add tracepoint returned;
 * a deletion runs under the mapping's i_pages lock that a new add of the
 * page must take. So when an event on a page arrives, the event it must
 * follow is already written into whatever slot holds it. Each event
 * therefore first flushes any slot whose run overlaps its pages, then
 * takes its own timestamp: the flushed run is ahead of it in the ring and
 * in time. Slots are guarded by a lock word (cmpxchg): a run is written
 * to the ring while its slot is held, so a run seen by a later event is
 * either in the ring already or still in its slot.
 * The look costs a few loads per slot in use (RUN_WAYS per CPU) on every
 * event: nothing on a small machine, a scan of a few hundred slots on a
 * large one.
 *
 * Readahead triggers are told by thread and fault window in user space:
 * a thread's add run is flushed when the thread begins or ends a fault,
 * so a run lies wholly inside or outside each fault and reaches the ring
 * before the fault's own record.
 */
/* Per CPU, one slot for adds and RUN_WAYS - 1 for deletions: reclaim
 * takes folios in LRU order, which interleaves a few ascending streams
 * (the regions that two threads read), each of them a run. */
#define RUN_WAYS 4
#define RUN_CPUS 64
#define RUN_SLOTS (RUN_WAYS * RUN_CPUS)
#define RUN_SPIN 4096

/* Set at load time: runs (the default), one page_event per folio as the
 * kernel reports them, or both side by side in one ring, so that a test
 * checks the runs against the folios of the very same events. */
#define PAGES_RUNS 0
#define PAGES_FOLIOS 1
#define PAGES_BOTH 2
const volatile __u32 page_records = PAGES_RUNS;
/* Slots in use: RUN_WAYS per possible CPU, at most RUN_SLOTS. */
const volatile __u32 run_slots = RUN_SLOTS;

#define RUN_WORDS (IOCORR_RUN_PAGES / 64)

struct page_run {
	__u32 lock;
	__u16 kind; /* 0: empty, else EV_PAGE_ADD or EV_PAGE_DEL */
	__u8 phase;
	__u8 pad;
	__u32 tgid;
	__u32 tid;
	__u32 token;
	__u32 op;
	__u32 cpu;
	__u32 dev;
	__u32 nr_folios;
	__u32 nr_pages;
	__u32 span;
	__u64 ino;
	__u64 index;
	__u64 first_ts;
	__u64 last_ts;
	__u64 pages[RUN_WORDS]; /* as in struct page_run_event */
} __attribute__((aligned(64)));

struct page_run runs[RUN_SLOTS] = {};

static long run_spin(__u64 i, void *data)
{
	__u32 slot = *(__u32 *)data;

	if (slot >= RUN_SLOTS)
		return 1;
	return __sync_val_compare_and_swap(&runs[slot].lock, 0, 1) == 0;
}

/* run_lock takes slot i. The holder is a BPF program on another CPU that
 * keeps it for a ring reservation and a few stores, so the wait is short;
 * the bound only guards against the impossible. */
static __always_inline bool run_lock(__u32 slot)
{
	if (slot >= RUN_SLOTS)
		return false;
	if (__sync_val_compare_and_swap(&runs[slot].lock, 0, 1) == 0)
		return true;
	return bpf_loop(RUN_SPIN, run_spin, &slot, 0) < RUN_SPIN;
}

static __always_inline void run_unlock(struct page_run *r)
{
	__sync_lock_test_and_set(&r->lock, 0);
}

/* run_output puts slot r's run in the ring, with its slot held, and
 * empties the slot. The record ends after the bitmap words its span needs
 * (none for a run without holes): bpf_ringbuf_output takes a size known
 * only here, and writes the record in one go, in slot order. */
static __always_inline void run_output(struct page_run *r)
{
	struct page_run_event e;
	__u32 words = 0;

	if (!r->kind)
		return;
	e.hdr.ts = r->last_ts;
	e.hdr.tgid = r->tgid;
	e.hdr.tid = r->tid;
	e.hdr.token = r->token;
	e.hdr.op = r->op;
	e.hdr.type = EV_PAGE_RUN;
	e.hdr.phase = r->phase;
	e.hdr.pad0 = 0;
	e.hdr.cpu = r->cpu;
	e.ino = r->ino;
	e.index = r->index;
	e.first_ts = r->first_ts;
	e.dev = r->dev;
	e.kind = r->kind;
	e.pad = 0;
	e.nr_pages = r->nr_pages;
	e.span = r->span;
	e.nr_folios = r->nr_folios;
	e.pad2 = 0;
	if (r->nr_pages < r->span)
		words = (r->span + 63) / 64;
	if (words > RUN_WORDS)
		words = RUN_WORDS;
	for (int w = 0; w < RUN_WORDS; w++)
		e.pages[w] = w < words ? r->pages[w] : 0;
	if (bpf_ringbuf_output(&events, &e, offsetof(struct page_run_event, pages) + words * 8,
			       wakeup_flags(EV_PAGE_RUN)))
		count_lost(EV_PAGE_RUN);
	r->kind = 0;
}

enum run_match {
	RUN_ANY = 0,       /* every pending run */
	RUN_OVERLAP = 1,   /* runs of the file that hold one of the pages */
	RUN_TID_ADDS = 2,  /* add runs of the thread */
};

struct run_flush {
	__u64 ino;
	__u64 index;
	__u64 nr_pages;
	__u32 dev;
	__u32 tid;
	__u32 match;
	__u32 pad;
};

/* word_mask is the bits of word w that pages [lo, hi) of a window take. */
static __always_inline __u64 word_mask(int w, __u64 lo, __u64 hi)
{
	__u64 a = lo > (__u64)w * 64 ? lo : (__u64)w * 64;
	__u64 b = hi < (__u64)w * 64 + 64 ? hi : (__u64)w * 64 + 64;

	if (a >= b)
		return 0;
	if (b - a == 64)
		return ~0ULL;
	return ((1ULL << (b - a)) - 1) << (a - (__u64)w * 64);
}

/* run_holds says whether one of pages [index, index + n) is in run r. */
static __always_inline bool run_holds(struct page_run *r, __u64 index, __u64 n)
{
	__u64 lo, hi;

	if (index >= r->index + r->span || r->index >= index + n)
		return false;
	if (r->nr_pages >= r->span)
		return true;
	lo = index > r->index ? index - r->index : 0;
	hi = index + n - r->index;
	for (int w = 0; w < RUN_WORDS; w++)
		if (r->pages[w] & word_mask(w, lo, hi))
			return true;
	return false;
}

static __always_inline void run_set(struct page_run *r, __u64 lo, __u64 hi)
{
	for (int w = 0; w < RUN_WORDS; w++)
		r->pages[w] |= word_mask(w, lo, hi);
}

static __always_inline bool run_matches(struct page_run *r, struct run_flush *f)
{
	if (!r->kind)
		return false;
	switch (f->match) {
	case RUN_OVERLAP:
		return r->ino == f->ino && r->dev == f->dev && run_holds(r, f->index, f->nr_pages);
	case RUN_TID_ADDS:
		return r->kind == EV_PAGE_ADD && r->tid == f->tid;
	}
	return true;
}

static long run_flush_slot(__u64 i, void *data)
{
	struct run_flush *f = data;
	struct page_run *r;

	if (i >= run_slots || i >= RUN_SLOTS)
		return 1;
	r = &runs[i];
	/* An unlocked look first: a run that matters was written before this
	 * event began (see above), and most slots do not match. */
	if (!run_matches(r, f))
		return 0;
	if (!run_lock(i)) {
		/* Never seen: the run's order against this event is not sure. */
		count_lost(EV_PAGE_RUN);
		return 0;
	}
	if (run_matches(r, f))
		run_output(r);
	run_unlock(r);
	return 0;
}

static __always_inline void flush_runs(struct run_flush *f)
{
	bpf_loop(RUN_SLOTS, run_flush_slot, f, 0);
}

/* flush_thread_adds puts the thread's pending add runs in the ring: its
 * fault begins or ends (the fault programs call it). */
static __always_inline void flush_thread_adds(__u32 tid)
{
	struct run_flush f = {.tid = tid, .match = RUN_TID_ADDS};

	if (page_records != PAGES_FOLIOS)
		flush_runs(&f);
}

/* flush_all_runs puts every pending run in the ring: at a token boundary,
 * and when user space stops recording. */
static __always_inline void flush_all_runs(void)
{
	struct run_flush f = {.match = RUN_ANY};

	if (page_records != PAGES_FOLIOS)
		flush_runs(&f);
}

/* What a folio must share with a run to extend it. */
struct run_key {
	__u64 ino;
	__u64 index;
	__u64 nr;
	__u32 dev;
	__u32 tid;
	__u32 token;
	__u32 op;
	__u16 kind;
	__u8 phase;
	__u8 pad[5];
};

/* run_extends says whether the folio extends run r: same kind, file,
 * thread and stamp, and it comes after the run, right after it while the
 * run has no hole, or anywhere in the run's window. */
static __always_inline bool run_extends(struct page_run *r, struct run_key *k)
{
	return r->kind == k->kind && r->ino == k->ino && r->dev == k->dev && r->tid == k->tid &&
	       r->token == k->token && r->phase == k->phase && r->op == k->op && k->index >= r->index + r->span &&
	       ((k->index == r->index + r->span && r->nr_pages == r->span) ||
		k->index + k->nr <= r->index + IOCORR_RUN_PAGES);
}

/* page_fallback records a folio as its own page_event when its run slot
 * stays held (its holder was preempted on this CPU): one record more,
 * never a folio lost. */
static __always_inline int page_fallback(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u32 order)
{
	return page_event(kind, dev, ino, index, 0, order, true);
}

static __always_inline int page_run_event(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u32 order)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id, cpu, slot, base, first, ways, victim, token, op = 0;
	__u64 nr = 1ULL << (order & 31), ts, oldest;
	struct run_flush f = {.ino = ino, .index = index, .nr_pages = nr, .dev = dev, .match = RUN_OVERLAP};
	struct run_key k = {};
	struct proc_state *ps;
	struct page_run *r;
	__u8 phase;

	flush_runs(&f);
	cpu = bpf_get_smp_processor_id();
	ps = bpf_map_lookup_elem(&traced, &tgid);
	if (ps) {
		token = ps->token;
		phase = ps->phase;
		if (probe_ops) {
			__u32 *o = bpf_map_lookup_elem(&cur_op, &tid);
			if (o)
				op = *o;
		}
	} else {
		token = last_stamp.token;
		phase = last_stamp.phase;
	}
	/* Taken after the flushes: later than every run they wrote. */
	ts = bpf_ktime_get_ns();
	k.kind = kind;
	k.phase = phase;
	k.dev = dev;
	k.tid = tid;
	k.token = token;
	k.op = op;
	k.ino = ino;
	k.index = index;
	k.nr = nr;
	/* Adds and deletions keep apart runs: under a memory limit the
	 * thread that reads ahead also reclaims, between two of its adds. */
	base = (cpu & (RUN_CPUS - 1)) * RUN_WAYS;
	first = kind == EV_PAGE_ADD ? 0 : 1;
	ways = kind == EV_PAGE_ADD ? 1 : RUN_WAYS - 1;
	for (int w = 0; w < RUN_WAYS - 1; w++) {
		if (w >= ways)
			break;
		slot = (base + first + w) & (RUN_SLOTS - 1);
		r = &runs[slot];
		if (!run_extends(r, &k))
			continue;
		if (!run_lock(slot))
			return page_fallback(kind, dev, ino, index, order);
		if (run_extends(r, &k)) {
			run_set(r, index - r->index, index - r->index + nr);
			r->span = index + nr - r->index;
			r->nr_pages += nr;
			r->nr_folios += 1;
			r->last_ts = ts;
			run_unlock(r);
			return 0;
		}
		run_unlock(r);
	}
	/* No run takes the folio: it starts one in an empty way, or in
	 * place of the way's oldest run. */
	victim = base + first;
	oldest = ~0ULL;
	for (int w = 0; w < RUN_WAYS - 1; w++) {
		if (w >= ways)
			break;
		slot = (base + first + w) & (RUN_SLOTS - 1);
		r = &runs[slot];
		if (!r->kind) {
			victim = slot;
			break;
		}
		if (r->last_ts < oldest) {
			oldest = r->last_ts;
			victim = slot;
		}
	}
	slot = victim & (RUN_SLOTS - 1);
	r = &runs[slot];
	if (!run_lock(slot))
		return page_fallback(kind, dev, ino, index, order);
	run_output(r);
	r->kind = kind;
	r->phase = phase;
	r->tgid = tgid;
	r->tid = tid;
	r->token = token;
	r->op = op;
	r->cpu = cpu;
	r->dev = dev;
	r->nr_folios = 1;
	r->nr_pages = nr;
	r->span = nr;
	r->ino = ino;
	r->index = index;
	r->first_ts = ts;
	r->last_ts = ts;
	for (int w = 0; w < RUN_WORDS; w++)
		r->pages[w] = word_mask(w, 0, nr);
	run_unlock(r);
	return 0;
}

static __always_inline int page_cache_event(__u16 kind, __u32 dev, __u64 ino, __u64 index, __u64 pfn, __u32 order)
{
	if (page_records != PAGES_RUNS) {
		page_event(kind, dev, ino, index, pfn, order, true);
		if (page_records == PAGES_FOLIOS)
			return 0;
	}
	/* The cheap test first: most page-cache events are of other files. */
	if (!is_model_file(dev, ino) && !is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	return page_run_event(kind, dev, ino, index, order);
}

/* User space runs this (BPF_PROG_TEST_RUN) when it stops recording, so
 * that the runs still pending reach the ring. */
SEC("raw_tp")
int flush_page_runs(void *ctx)
{
	flush_all_runs();
	return 0;
}

/* The classic tracepoints are used for the page cache because their
 * records carry folio_order() as the kernel computed it; recomputing it
 * from struct folio in BPF depends on folio flag layouts that change. */
SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int page_add(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	return page_cache_event(EV_PAGE_ADD, ctx->s_dev, ctx->i_ino, ctx->index, ctx->pfn, ctx->order);
}

SEC("tracepoint/filemap/mm_filemap_delete_from_page_cache")
int page_del(struct trace_event_raw_mm_filemap_op_page_cache *ctx)
{
	return page_cache_event(EV_PAGE_DEL, ctx->s_dev, ctx->i_ino, ctx->index, ctx->pfn, ctx->order);
}

SEC("tracepoint/filemap/mm_filemap_fault")
int filemap_fault(struct trace_event_raw_mm_filemap_fault *ctx)
{
	if (!is_traced(bpf_get_current_pid_tgid() >> 32))
		return 0;
	return page_event(EV_FILEMAP_FAULT, ctx->s_dev, ctx->i_ino, ctx->index, 0, 0, true);
}

static __always_inline int ra_event(__u32 kind, __u32 dev, __u64 ino, __u64 index, __u64 nr, __u32 async_size,
				    __u32 ra_pages, __u32 mmap_miss, __u32 order)
{
	struct ra_event *e;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!is_model_file(dev, ino) && !is_traced(tgid))
		return 0;
	e = reserve(sizeof(*e), EV_READAHEAD);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_READAHEAD);
	e->ino = ino;
	e->index = index;
	e->nr_pages = nr;
	e->dev = dev;
	e->kind = kind;
	e->async_size = async_size;
	e->ra_pages = ra_pages;
	e->mmap_miss = mmap_miss;
	e->order = order;
	submit(e, EV_READAHEAD);
	return 0;
}

SEC("tracepoint/readahead/page_cache_sync_ra")
int ra_sync(struct trace_event_raw_page_cache_ra_op *ctx)
{
	return ra_event(RA_SYNC, ctx->s_dev, ctx->i_ino, ctx->index, ctx->size, ctx->async_size, ctx->ra_pages,
			ctx->mmap_miss, ctx->order);
}

SEC("tracepoint/readahead/page_cache_async_ra")
int ra_async(struct trace_event_raw_page_cache_ra_op *ctx)
{
	return ra_event(RA_ASYNC, ctx->s_dev, ctx->i_ino, ctx->index, ctx->size, ctx->async_size, ctx->ra_pages,
			ctx->mmap_miss, ctx->order);
}

SEC("tracepoint/readahead/page_cache_ra_unbounded")
int ra_unbounded(struct trace_event_raw_page_cache_ra_unbounded *ctx)
{
	return ra_event(RA_UNBOUNDED, ctx->s_dev, ctx->i_ino, ctx->index, ctx->nr_to_read, ctx->lookahead_size, 0, 0,
			0);
}

SEC("tracepoint/readahead/page_cache_ra_order")
int ra_order(struct trace_event_raw_page_cache_ra_order *ctx)
{
	return ra_event(RA_ORDER, ctx->s_dev, ctx->i_ino, ctx->index, ctx->size, ctx->async_size, ctx->ra_pages, 0,
			ctx->order);
}

/* ---- block requests --------------------------------------------------- */

static __always_inline __u32 rq_dev(struct request *rq)
{
	struct gendisk *disk = BPF_CORE_READ(rq, q, disk);

	if (!disk)
		return 0;
	return ((__u32)BPF_CORE_READ(disk, major) << 20) | (__u32)BPF_CORE_READ(disk, first_minor);
}

/* The operation of a block request is the low byte of cmd_flags
 * (REQ_OP_MASK); REQ_OP_READ is 0 (include/linux/blk_types.h). User space
 * decodes the same byte with internal/kernel.BlockOpOf. */
static __always_inline bool req_is_read(__u32 cmd_flags)
{
	return (cmd_flags & 0xff) == 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_issue, struct request *rq)
{
	struct blk_start bs = {};
	__u64 key = (__u64)rq;

	bs.cmd_flags = BPF_CORE_READ(rq, cmd_flags);
	/* iocorr's own writes (the spool) are not the child's I/O. Its reads
	 * (library symbols read while the command runs, after a cache drop)
	 * are kept: the device's read total must add up to what diskstats
	 * says. 0 means no filter: requests issued from softirq on an idle
	 * CPU run as the idle task, whose tgid is 0. */
	if (self_tgid && (bpf_get_current_pid_tgid() >> 32) == self_tgid && !req_is_read(bs.cmd_flags))
		return 0;
	bs.dev = rq_dev(rq);
	if (filter_devs && !bpf_map_lookup_elem(&devs, &bs.dev))
		return 0;
	bs.ts = bpf_ktime_get_ns();
	bs.sector = BPF_CORE_READ(rq, __sector);
	bs.bytes = BPF_CORE_READ(rq, __data_len);
	bpf_map_update_elem(&blk_starts, &key, &bs, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct blk_start *bs = bpf_map_lookup_elem(&blk_starts, &key);
	struct block_event *e;

	if (!bs)
		return 0;
	e = reserve(sizeof(*e), EV_BLOCK);
	if (e) {
		fill_hdr(&e->hdr, EV_BLOCK);
		e->issue_ts = bs->ts;
		e->sector = bs->sector;
		e->dev = bs->dev;
		e->bytes = bs->bytes;
		e->cmd_flags = bs->cmd_flags;
		e->error = error;
		submit(e, EV_BLOCK);
	}
	bpf_map_delete_elem(&blk_starts, &key);
	return 0;
}

/* ---- processes -------------------------------------------------------- */

static __always_inline void task_event(__u32 kind, __u32 child, __s32 exit_code)
{
	struct task_event *e = reserve(sizeof(*e), EV_TASK);

	if (!e)
		return;
	fill_hdr(&e->hdr, EV_TASK);
	e->kind = kind;
	e->child = child;
	e->exit_code = exit_code;
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	submit(e, EV_TASK);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(proc_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ptid = BPF_CORE_READ(parent, pid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	struct proc_state ps = {};

	/* Threads share their process's state; only new processes join. */
	if (ptgid == ctgid)
		return 0;
	if (bpf_map_lookup_elem(&forkers, &ptid)) {
		/* The command iocorr starts: no fork event, since its parent is
		 * not traced and user space knows the pid from the fork. */
		bpf_map_update_elem(&traced, &ctgid, &ps, BPF_NOEXIST);
		return 0;
	}
	if (!is_traced(ptgid))
		return 0;
	bpf_map_update_elem(&traced, &ctgid, &ps, BPF_NOEXIST);
	task_event(TASKEV_FORK, ctgid, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (!is_traced(BPF_CORE_READ(p, tgid)))
		return 0;
	/* A new address space: nothing cached of the old one holds. */
	vma_changing(BPF_CORE_READ(p, tgid));
	task_event(TASKEV_EXEC, 0, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(proc_exit, struct task_struct *p, bool group_dead)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	if (!is_traced(tgid))
		return 0;
	/* Each exiting thread: a fault it began and never finished (a signal
	 * interrupted it) would otherwise go unreported. */
	flush_pending_fault(BPF_CORE_READ(p, pid));
	if (!group_dead)
		return 0;
	task_event(TASKEV_EXIT, 0, BPF_CORE_READ(p, exit_code));
	bpf_map_delete_elem(&traced, &tgid);
	bpf_map_delete_elem(&vma_caches, &tgid);
	return 0;
}

/* ---- file mappings ---------------------------------------------------- */

/* The record of syscalls/sys_exit_* (its format file): not the same
 * struct as raw_syscalls' sys_exit, so it is spelled out here. */
struct sys_exit_mmap_args {
	struct trace_entry ent;
	int syscall_nr;
	long ret;
};

SEC("tracepoint/syscalls/sys_exit_mmap")
int mmap_exit(struct sys_exit_mmap_args *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	unsigned long addr = ctx->ret;
	struct vma_info vi = {};
	struct mmap_event *e;
	struct file_key k = {};
	__u8 one = 1;

	vma_changing(tgid);
	if (!is_traced(tgid) || addr >= EINVAL_ADDR_MAX)
		return 0;
	vi.addr = addr;
	bpf_find_vma(bpf_get_current_task_btf(), addr, vma_cb, &vi, 0);
	if (!vi.found || !vi.ino)
		return 0;
	e = reserve(sizeof(*e), EV_MMAP);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_MMAP);
	e->start = vi.start;
	e->end = vi.end;
	e->pgoff = vi.pgoff;
	e->ino = vi.ino;
	e->dev = vi.dev;
	e->vm_flags = vi.flags;
	e->stopped = 0;
	k.ino = vi.ino;
	k.dev = vi.dev;
	if ((vi.flags & VM_EXEC) && bpf_map_update_elem(&seen_exec, &k, &one, BPF_NOEXIST) == 0) {
		/* Stop the process before it can run code of this file, so that
		 * user space attaches uprobes first and no call is missed; it
		 * sends SIGCONT when done. */
		if (bpf_send_signal(SIGSTOP) == 0)
			e->stopped = 1;
	}
	submit(e, EV_MMAP);
	return 0;
}

/* ---- llama.cpp: tokens ------------------------------------------------- */

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
	bpf_probe_read_user(&n_tokens, sizeof(n_tokens), (void *)(PT_REGS_SP(ctx) + 8));
	flush_all_runs();
	ps->token += 1;
	ps->phase = n_tokens > 1 ? PHASE_PREFILL : PHASE_DECODE;
	last_stamp.token = ps->token;
	last_stamp.phase = ps->phase;

	ds.ts = bpf_ktime_get_ns();
	ds.ctx = (__u64)lctx;
	ds.n_tokens = n_tokens;
	bpf_map_update_elem(&decode_starts, &tid, &ds, BPF_ANY);

	e = reserve(sizeof(*e), EV_DECODE_BEGIN);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_DECODE_BEGIN);
	e->ctx = ds.ctx;
	e->begin_ts = ds.ts;
	e->n_tokens = n_tokens;
	e->ret = 0;
	e->op_hits = ps->op_hits;
	submit(e, EV_DECODE_BEGIN);
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
	e = reserve(sizeof(*e), EV_DECODE_END);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_DECODE_END);
	e->op_hits = ps->op_hits;
	e->ctx = ds ? ds->ctx : 0;
	e->begin_ts = ds ? ds->ts : 0;
	e->n_tokens = ds ? ds->n_tokens : 0;
	e->ret = ret;
	submit(e, EV_DECODE_END);
	if (ds)
		bpf_map_delete_elem(&decode_starts, &tid);
	return 0;
}

/* ---- ggml: graphs ------------------------------------------------------ */

struct walk_ctx {
	__u64 nodes;    /* struct ggml_tensor ** */
	__u64 graph_id;
	__u32 n_nodes;
	__u32 n_weight;
	struct event_hdr hdr;
};

static __always_inline __u64 read_ptr(__u64 addr)
{
	__u64 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u32 read_u32(__u64 addr)
{
	__u32 v = 0;
	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

static __always_inline __u64 mix(__u64 h, __u64 v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h;
}

/* Emits one EV_NODE for a weight-like source (a leaf: op NONE with data)
 * of a node. Whether it is file-backed is resolved here, at the moment
 * the graph runs, from the VMA that holds its data. */
static __always_inline void emit_src(struct walk_ctx *w, __u64 node, __u32 idx, __u32 node_op, __u32 slot, __u64 src)
{
	struct node_event *e;
	struct vma_info vi = {};
	__u64 data;

	if (!src)
		return;
	if (read_u32(src + t_op) != 0) /* GGML_OP_NONE: a leaf, not a result */
		return;
	data = read_ptr(src + t_data);
	if (!data)
		return;
	e = reserve(sizeof(*e), EV_NODE);
	if (!e)
		return;
	e->hdr = w->hdr;
	e->hdr.type = EV_NODE;
	e->graph_id = w->graph_id;
	e->node = node;
	e->weight = src;
	e->weight_data = data;
	bpf_probe_read_user(e->weight_ne, sizeof(e->weight_ne), (void *)(src + t_ne));
	bpf_probe_read_user(e->weight_nb, sizeof(e->weight_nb), (void *)(src + t_nb));
	vi.addr = data;
	bpf_find_vma(bpf_get_current_task_btf(), data, vma_cb, &vi, 0);
	e->ino = vi.ino;
	e->dev = vi.dev;
	e->file_off = vi.file_off;
	e->node_idx = idx;
	e->op = node_op;
	e->weight_type = read_u32(src + t_type);
	e->src_slot = slot;
	e->pad = 0;
	bpf_probe_read_user_str(e->node_name, sizeof(e->node_name), (void *)(node + t_name));
	bpf_probe_read_user_str(e->weight_name, sizeof(e->weight_name), (void *)(src + t_name));
	w->n_weight++;
	bpf_ringbuf_submit(e, wakeup_flags(EV_NODE));
}

static long walk_node(__u64 i, void *data)
{
	struct walk_ctx *w = data;
	__u64 node, srcs[GGML_MAX_SRC] = {};
	__u32 op;

	if (i >= w->n_nodes)
		return 1;
	node = read_ptr(w->nodes + i * 8);
	if (!node)
		return 0;
	op = read_u32(node + t_op);
	bpf_probe_read_user(srcs, sizeof(srcs), (void *)(node + t_src));
	for (int s = 0; s < GGML_MAX_SRC; s++)
		emit_src(w, node, i, op, s, srcs[s]);
	return 0;
}

/* ggml_graph_compute(struct ggml_cgraph *cgraph, struct ggml_cplan *cplan):
 * once per graph, so reading the graph here costs one uprobe hit per
 * token however many ops run. */
SEC("uprobe")
int BPF_KPROBE(graph_compute, void *cgraph)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);
	struct graph_event *e;
	struct walk_ctx w = {};
	__u64 g = (__u64)cgraph, id, n0, n1, n2;
	__s32 n_nodes;
	__u8 one = 1;

	if (!ps)
		return 0;
	ps->graph_seq += 1;
	n_nodes = (__s32)read_u32(g + g_n_nodes);
	if (n_nodes < 0 || n_nodes > MAX_GRAPH_NODES)
		n_nodes = 0;
	w.nodes = read_ptr(g + g_nodes);
	w.n_nodes = n_nodes;
	/* A fingerprint, not a full hash: llama.cpp rebuilds or reuses the
	 * same graph each token, so its size, node array and a few nodes with
	 * their first source identify it without walking all of it. */
	id = mix(0, g);
	id = mix(id, n_nodes);
	id = mix(id, w.nodes);
	if (n_nodes > 0) {
		n0 = read_ptr(w.nodes);
		n1 = read_ptr(w.nodes + (__u64)(n_nodes / 2) * 8);
		n2 = read_ptr(w.nodes + (__u64)(n_nodes - 1) * 8);
		id = mix(id, n0);
		id = mix(id, read_ptr(n0 + t_src));
		id = mix(id, n1);
		id = mix(id, read_ptr(n1 + t_src));
		id = mix(id, n2);
		id = mix(id, read_ptr(n2 + t_src));
		id = mix(id, read_u32(n2 + t_op));
	}
	w.graph_id = id;
	fill_hdr(&w.hdr, EV_GRAPH);
	e = reserve(sizeof(*e), EV_GRAPH);
	if (!e)
		return 0;
	e->hdr = w.hdr;
	e->cgraph = g;
	e->graph_id = id;
	e->n_nodes = n_nodes;
	e->seq = ps->graph_seq;
	e->is_new = bpf_map_update_elem(&graphs_seen, &id, &one, BPF_NOEXIST) == 0;
	e->file = bpf_get_attach_cookie(ctx);
	e->stopped = 0;
	{
		/* --probe ops: the first graph a file computes tells which CPU
		 * backend runs; stop the process so that its ops are probed
		 * before any of them runs (user space attaches, then SIGCONT). */
		__u32 *want = bpf_map_lookup_elem(&ops_pending, &e->file);
		if (want && __sync_val_compare_and_swap(want, 1, 2) == 1 && bpf_send_signal(SIGSTOP) == 0)
			e->stopped = 1;
	}
	e->n_weight_nodes = 0;
	if (e->is_new && n_nodes > 0)
		bpf_loop(n_nodes, walk_node, &w, 0);
	e->n_weight_nodes = w.n_weight;
	/* The graph event follows its nodes in the ring buffer only if it is
	 * submitted last; readers key nodes by graph_id, so order is free. */
	submit(e, EV_GRAPH);
	return 0;
}

/* ---- ggml: ops and experts -------------------------------------------- */

/* ggml_compute_forward_*(const struct ggml_compute_params *params,
 * struct ggml_tensor *dst): params->ith (first field) is the thread. */
static __always_inline int op_enter(struct pt_regs *ctx, void *params, void *dst)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);
	struct op_event *e;
	__u64 node = (__u64)dst, prev;
	__s32 ith = 0;
	__u32 seq;

	if (!ps)
		return 0;
	__sync_fetch_and_add(&ps->op_hits, 1);
	bpf_probe_read_user(&ith, sizeof(ith), params);
	/* Every thread of an op enters with the same dst; the first to swap
	 * last_node numbers the op, the others take its number. */
	prev = ps->last_node;
	if (prev != node && __sync_val_compare_and_swap(&ps->last_node, prev, node) == prev)
		__sync_fetch_and_add(&ps->op_seq, 1);
	seq = ps->op_seq;
	bpf_map_update_elem(&cur_op, &tid, &seq, BPF_ANY);
	if (ith != 0)
		return 0;
	e = reserve(sizeof(*e), EV_OP);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, EV_OP);
	e->hdr.op = seq;
	e->node = node;
	e->fn = bpf_get_attach_cookie(ctx);
	e->op = read_u32(node + t_op);
	bpf_probe_read_user_str(e->name, sizeof(e->name), (void *)(node + t_name));
	submit(e, EV_OP);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(op_begin, void *params, void *dst)
{
	return op_enter(ctx, params, dst);
}

/* The same, attached to a hundred functions through one uprobe_multi link:
 * one link is set up and torn down in one go, where a hundred single
 * uprobes take minutes to detach (each waits for an RCU grace period). */
/* Hits of the calibration probe, so that a calibration whose probed arm
 * did not run probed is refused rather than reported. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} calib_hits SEC(".maps");

/* The cheapest uprobe program: it measures what a uprobe hit costs by
 * itself (bpf.MeasureUprobeCost), apart from the programs' own work. */
SEC("uprobe")
int calibrate(void *ctx)
{
	__u32 k = 0;
	__u64 *n = bpf_map_lookup_elem(&calib_hits, &k);

	if (n)
		*n += 1;
	return 0;
}

SEC("uprobe.multi")
int BPF_KPROBE(op_begin_multi, void *params, void *dst)
{
	return op_enter(ctx, params, dst);
}

static __always_inline bool name_has_prefix(const char *name, const char *prefix, int n)
{
	for (int i = 0; i < n; i++)
		if (name[i] != prefix[i])
			return false;
	return true;
}

struct experts_ctx {
	__u64 ids;
	__u64 data;
	__u64 row_stride;
	__u32 n_used;
	__u32 n_tokens;
	__u32 rows_per_event;
	__u32 pad;
	char name[IOCORR_NAME_LEN];
};

/* One experts event: rows [chunk*rows_per_event, ...) of the ids tensor. */
static long emit_experts_chunk(__u64 chunk, void *data)
{
	struct experts_ctx *x = data;
	struct experts_event *e;
	__u32 row = chunk * x->rows_per_event, count = 0;
	__u32 sz = x->n_used * 4;

	if (row >= x->n_tokens)
		return 1;
	e = reserve(sizeof(*e), EV_EXPERTS);
	if (!e)
		return 1;
	fill_hdr(&e->hdr, EV_EXPERTS);
	e->tensor = x->ids;
	e->n_used = x->n_used;
	e->n_tokens = x->n_tokens;
	e->first = row * x->n_used;
	__builtin_memcpy(e->name, x->name, sizeof(e->name));
	for (int r = 0; r < IOCORR_MAX_EXPERT_IDS; r++) {
		__u32 off = count;

		if (r >= x->rows_per_event || row >= x->n_tokens)
			break;
		if (off > IOCORR_MAX_EXPERT_IDS - 32 || sz == 0 || sz > 128)
			break;
		bpf_probe_read_user(&e->ids[off], sz, (void *)(x->data + (__u64)row * x->row_stride));
		count += x->n_used;
		row++;
	}
	e->count = count;
	submit(e, EV_EXPERTS);
	return 0;
}

/* ggml_compute_forward_get_rows(params, dst) for the node that gathers the
 * router weights of the selected experts (llama.cpp names it
 * "ffn_moe_weights-L"): its src[1] holds the expert ids, and they are
 * valid here because a node runs only after its inputs are computed. */
SEC("uprobe")
int BPF_KPROBE(get_rows_begin, void *params, void *dst)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 node = (__u64)dst;
	__s64 ne[4] = {}, nb[4] = {};
	struct experts_ctx x = {};
	__s32 ith = 0;

	if (!is_traced(tgid))
		return 0;
	bpf_probe_read_user(&ith, sizeof(ith), params);
	if (ith != 0)
		return 0;
	bpf_probe_read_user_str(x.name, sizeof(x.name), (void *)(node + t_name));
	if (!name_has_prefix(x.name, "ffn_moe_weights", 15))
		return 0;
	x.ids = read_ptr(node + t_src + 8);
	if (!x.ids || read_u32(x.ids + t_type) != ggml_type_i32)
		return 0;
	x.data = read_ptr(x.ids + t_data);
	bpf_probe_read_user(ne, sizeof(ne), (void *)(x.ids + t_ne));
	bpf_probe_read_user(nb, sizeof(nb), (void *)(x.ids + t_nb));
	/* More than 32 experts per token is outside every MoE we know of;
	 * such a tensor is not what we think it is. */
	if (!x.data || ne[0] <= 0 || ne[0] > 32 || ne[1] <= 0 || nb[1] <= 0)
		return 0;
	x.n_used = ne[0];
	x.n_tokens = ne[1] > 65536 ? 65536 : ne[1];
	/* The ids are a view (top-k of an argsort): rows are nb[1] apart, not
	 * n_used * 4, so each token's row is read on its own. */
	x.row_stride = nb[1];
	x.rows_per_event = IOCORR_MAX_EXPERT_IDS / x.n_used;
	bpf_loop((x.n_tokens + x.rows_per_event - 1) / x.rows_per_event, emit_experts_chunk, &x, 0);
	return 0;
}

/* ---- reads of model files --------------------------------------------- */

#include "reads.bpf.h"

/* ---- scheduler (--probe sched) ---------------------------------------- */

#include "sched.bpf.h"

/* Referenced so that the object's BTF, from which bpf2go writes the Go
 * types, holds every event struct and enum. */
const struct fault_event *unused_fault_event __attribute__((unused));
const struct page_event *unused_page_event __attribute__((unused));
const struct page_run_event *unused_page_run_event __attribute__((unused));
const struct ra_event *unused_ra_event __attribute__((unused));
const struct block_event *unused_block_event __attribute__((unused));
const struct decode_event *unused_decode_event __attribute__((unused));
const struct graph_event *unused_graph_event __attribute__((unused));
const struct node_event *unused_node_event __attribute__((unused));
const struct op_event *unused_op_event __attribute__((unused));
const struct experts_event *unused_experts_event __attribute__((unused));
const struct task_event *unused_task_event __attribute__((unused));
const struct mmap_event *unused_mmap_event __attribute__((unused));
const struct sched_event *unused_sched_event __attribute__((unused));
const struct read_event *unused_read_event __attribute__((unused));
enum event_type unused_event_type __attribute__((unused));
enum phase unused_phase __attribute__((unused));
enum fault_class unused_fault_class __attribute__((unused));
enum ra_kind unused_ra_kind __attribute__((unused));
enum task_kind unused_task_kind __attribute__((unused));
enum sched_kind unused_sched_kind __attribute__((unused));
enum read_kind unused_read_kind __attribute__((unused));

char LICENSE[] SEC("license") = "Dual BSD/GPL";
