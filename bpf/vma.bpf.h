/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Mappings of traced processes: which file and offset an address is
 * (bpf_find_vma behind a per-process cache), and the files they map
 * (EV_MMAP, with the stop that lets user space attach uprobes first).
 */

#define VM_EXEC 0x00000004
#define EINVAL_ADDR_MAX (-4095UL)

/* Executable files already reported, so a process is stopped once per
 * file for uprobe attachment. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct file_key);
	__type(value, __u8);
} seen_exec SEC(".maps");

struct vma_info {
	__u64 addr;
	__u64 ino;
	__u64 file_off;
	__u64 start;
	__u64 end;
	__u64 pgoff;
	__u64 flags;
	__u32 dev;
	__u16 found;
	/* The lookup was not made: bpf_find_vma only try-locks the mmap lock,
	 * and another thread of the process (its mmap, munmap, mprotect; a
	 * uprobe being registered) held it. Measured: a thread mapping and
	 * unmapping in a loop made 33 of 40 lookups of its sibling's mmaps
	 * fail. Not found is not "anonymous" then. Two bytes, as found: the
	 * struct stays 64 bytes on stacks a 6.1 verifier counts to 512. */
	__u16 busy;
};

/* vma__file_offset is the byte of the file that addr maps to in a mapping
 * that starts at vm_start with page offset vm_pgoff (mid-file mappings too). */
static __always_inline __u64 vma__file_offset(__u64 addr, __u64 vm_start, __u64 vm_pgoff)
{
	return addr - vm_start + (vm_pgoff << cfg.page_shift);
}

static long vma__find_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
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
	vi->file_off = vma__file_offset(vi->addr, vi->start, vi->pgoff);
	return 0;
}

#define EBUSY 16

/* vma__find fills vi with the current task's mapping of vi->addr, from the
 * kernel's own tree (no cache): vi->found says whether there is one, and
 * vi->busy that nobody could tell. */
static __always_inline void vma__find(struct vma_info *vi)
{
	if (!cfg.use_find_vma)
		return;
	vi->busy = bpf_find_vma(bpf_get_current_task_btf(), vi->addr, vma__find_cb, vi, 0) == -EBUSY;
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

/* vma_cache__lookup fills vi from the cache: false on a miss. */
static __always_inline bool vma_cache__lookup(struct vma_cache *c, __u64 gen, struct vma_info *vi)
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
				vi->file_off = vma__file_offset(vi->addr, s->start, s->pgoff);
			return true;
		}
	}
	return false;
}

static __always_inline void vma_cache__remember(struct vma_cache *c, __u64 gen, struct vma_info *vi)
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

/* vma__resolve finds the mapping of vi->addr of the current process. */
static __always_inline void vma__resolve(__u32 tgid, struct proc_state *ps, struct vma_info *vi)
{
	struct vma_cache *c;
	__u64 gen = *(volatile __u64 *)&ps->vma_gen;

	if (!cfg.use_find_vma)
		return;
	c = bpf_map_lookup_elem(&vma_caches, &tgid);
	if (c && vma_cache__lookup(c, gen, vi))
		return;
	vma__find(vi);
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
	vma_cache__remember(c, gen, vi);
}

/* vma_cache__invalidate marks the current process's cached mappings stale. */
static __always_inline void vma_cache__invalidate(__u32 tgid)
{
	struct proc_state *ps = bpf_map_lookup_elem(&traced, &tgid);

	if (ps)
		__sync_fetch_and_add(&ps->vma_gen, 1);
}

static __always_inline int vma__syscall(void)
{
	vma_cache__invalidate(bpf_get_current_pid_tgid() >> 32);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mremap")
int vma_enter_mremap(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_exit_mremap")
int vma_exit_mremap(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_enter_brk")
int vma_enter_brk(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_exit_brk")
int vma_exit_brk(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_enter_shmat")
int vma_enter_shmat(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_exit_shmat")
int vma_exit_shmat(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_enter_shmdt")
int vma_enter_shmdt(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_exit_shmdt")
int vma_exit_shmdt(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_enter_remap_file_pages")
int vma_enter_remap(void *ctx) { return vma__syscall(); }
SEC("tracepoint/syscalls/sys_exit_remap_file_pages")
int vma_exit_remap(void *ctx) { return vma__syscall(); }

/* ---- file mappings ---------------------------------------------------- */

#define PROT_EXEC_FLAG 0x4
#define MAP_SHARED_FLAG 0x1
#define VM_READ 0x1
#define VM_SHARED 0x8

/* An mmap call of a traced process as it entered: the file comes from the
 * fd, the range from the result. It is the mapping for kernels without
 * bpf_find_vma, and where bpf_find_vma could not take the mmap lock. */
struct mmap_call {
	__u64 len;
	__u64 off;
	__u64 ino;
	__u64 prot;
	__u64 flags;
	__u32 dev;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tid */
	__type(value, struct mmap_call);
} mmap_calls SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_mmap")
int vma_enter_mmap(struct sys_enter_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct mmap_call mc = {};
	struct file *f;

	vma_cache__invalidate(id >> 32);
	if (!proc__is_traced(id >> 32))
		return 0;
	/* mmap(addr, len, prot, flags, fd, off) */
	f = fd__file(ctx->args[4]);
	if (!f) {
		/* Anonymous: no earlier call's file may stand for it. */
		bpf_map_delete_elem(&mmap_calls, &tid);
		return 0;
	}
	mc.len = ctx->args[1];
	mc.prot = ctx->args[2];
	mc.flags = ctx->args[3];
	mc.off = ctx->args[5];
	mc.ino = BPF_CORE_READ(f, f_inode, i_ino);
	mc.dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	bpf_map_update_elem(&mmap_calls, &tid, &mc, BPF_ANY);
	return 0;
}

/* mmap__from_call fills vi with the mapping the current thread's mmap
 * call made at addr, from what it asked for: the kernel maps exactly the
 * page-rounded length at the returned address, at the page offset given. */
static __always_inline void mmap__from_call(struct vma_info *vi)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct mmap_call *mc = bpf_map_lookup_elem(&mmap_calls, &tid);
	__u64 page = 1ULL << cfg.page_shift;

	if (!mc)
		return;
	vi->found = 1;
	vi->start = vi->addr;
	vi->end = vi->addr + ((mc->len + page - 1) & ~(page - 1));
	vi->pgoff = mc->off >> cfg.page_shift;
	vi->ino = mc->ino;
	vi->dev = mc->dev;
	/* PROT_READ/WRITE/EXEC are VM_READ/WRITE/EXEC's bits. */
	vi->flags = (mc->prot & (VM_READ | 0x2 | PROT_EXEC_FLAG)) | ((mc->flags & MAP_SHARED_FLAG) ? VM_SHARED : 0);
	vi->file_off = vi->pgoff << cfg.page_shift;
	bpf_map_delete_elem(&mmap_calls, &tid);
}

SEC("tracepoint/syscalls/sys_exit_mmap")
int mmap_exit(struct sys_exit_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	unsigned long addr = ctx->ret;
	struct vma_info vi = {};
	struct mmap_event *e;
	struct file_key k = {};
	__u8 one = 1;

	vma_cache__invalidate(tgid);
	if (!proc__is_traced(tgid) || addr >= EINVAL_ADDR_MAX)
		return 0;
	vi.addr = addr;
	/* The tree says what the mapping became (merged, its VM_ flags); the
	 * call what it asked for, exact too, and read without a lock: a
	 * library loaded while another thread maps memory is still stopped
	 * for and probed. */
	vma__find(&vi);
	if (vi.found)
		bpf_map_delete_elem(&mmap_calls, &tid);
	else
		mmap__from_call(&vi);
	if (!vi.found || !vi.ino)
		return 0;
	e = event__reserve(sizeof(*e), EV_MMAP);
	if (!e)
		return 0;
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
		/* Stopped before it can run code of this file, so that no
		 * call is missed. */
		e->stopped = proc__stop();
	}
	ring__submit(e, EV_MMAP);
	return 0;
}

/* A munmap call of a traced process as it entered: the range it names,
 * sent once the call returned 0. */
struct munmap_call {
	__u64 start;
	__u64 len;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tid */
	__type(value, struct munmap_call);
} munmap_calls SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_munmap")
int vma_enter_munmap(struct sys_enter_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct munmap_call mc = {};

	vma_cache__invalidate(id >> 32);
	if (!proc__is_traced(id >> 32))
		return 0;
	/* munmap(addr, len) */
	mc.start = ctx->args[0];
	mc.len = ctx->args[1];
	bpf_map_update_elem(&munmap_calls, &tid, &mc, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_munmap")
int vma_exit_munmap(struct sys_exit_args *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__u64 page = 1ULL << cfg.page_shift;
	struct munmap_call *mc;
	struct munmap_event *e;

	vma_cache__invalidate(id >> 32);
	mc = bpf_map_lookup_elem(&munmap_calls, &tid);
	if (!mc)
		return 0;
	/* A failed call unmapped nothing. */
	if (ctx->ret == 0 && mc->len) {
		e = event__reserve(sizeof(*e), EV_MUNMAP);
		if (e) {
			e->start = mc->start;
			e->end = mc->start + ((mc->len + page - 1) & ~(page - 1));
			ring__submit(e, EV_MUNMAP);
		}
	}
	bpf_map_delete_elem(&munmap_calls, &tid);
	return 0;
}
