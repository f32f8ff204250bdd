// SPDX-License-Identifier: GPL-2.0
/*
 * An independent observer for bpf/crosscheck_test.go. It watches the same
 * kernel events as iocorr's programs, but shares nothing with them:
 *
 *   - no vmlinux.h, no libbpf headers, no CO-RE: the context structs below
 *     are written by hand from the tracepoints' own format files
 *     (/sys/kernel/tracing/events/GROUP/NAME/format), and the test checks
 *     them against the running kernel's formats at compile time (the
 *     FMT_* macros it passes with -D, see the _Static_asserts);
 *   - classic tracepoints only (iocorr reads block requests from
 *     struct request through tp_btf; here they come from the
 *     tracepoint's record: dev, sector, nr_sector, rwbs);
 *   - loaded by iovisor/gobpf's own ELF loader (maps in "maps/NAME"
 *     sections with gobpf's struct bpf_map_def, programs in
 *     "tracepoint/GROUP/NAME" sections), not by cilium/ebpf.
 *
 * gobpf's loader only relocates map references (no BPF-to-BPF calls, no
 * .data/.rodata/.bss), so every helper is always_inline and there are no
 * global variables other than the maps.
 *
 * It records into hash maps that the test reads after the I/O:
 *   adds:      (dev, ino, index, order) -> count, for the files in `files`
 *   reads:     (dev, sector, bytes) -> count, read requests issued on the
 *              device in `config[0]`; bytes = nr_sector * 512
 *   completes: the same, from block_rq_complete (nr_sector there is the
 *              bytes completed / 512)
 *   dropped:   [0] page adds, [1] issues, [2] completions that did not fit
 *              in their map
 */

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;

#define SEC(name) __attribute__((section(name), used))
#define INLINE static inline __attribute__((always_inline))

/* include/uapi/linux/bpf.h values, stable ABI */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_ANY 0
#define BPF_NOEXIST 1

/* Helper ids (include/uapi/linux/bpf.h, __BPF_FUNC_MAPPER). */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;

/* gobpf's elf/include/bpf_map.h: one of these per "maps/NAME" section. */
struct bpf_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
	unsigned int pinning;
	char namespace[256];
};

/* ---- tracepoint records, from their format files ---------------------- */

/* filemap/mm_filemap_add_to_page_cache */
struct add_ctx {
	__u64 common; /* common_type, common_flags, common_preempt_count, common_pid */
	__u64 pfn;
	__u64 i_ino;
	__u64 index;
	__u32 s_dev;
	__u8 order;
};

/* block/block_rq_issue (only the fields used here) */
struct issue_ctx {
	__u64 common;
	__u32 dev;
	__u32 pad;
	__u64 sector;
	__u32 nr_sector;
	__u32 bytes;
	__u16 ioprio;
	char rwbs[10];
};

/* block/block_rq_complete */
struct complete_ctx {
	__u64 common;
	__u32 dev;
	__u32 pad;
	__u64 sector;
	__u32 nr_sector;
	int error;
	__u16 ioprio;
	char rwbs[10];
};

#define CHECK(type, field, fmt)                                                                                 \
	_Static_assert(__builtin_offsetof(struct type, field) == FMT_##fmt##_OFF,                               \
		       #type "." #field ": offset differs from the kernel's format file");                     \
	_Static_assert(sizeof(((struct type *)0)->field) == FMT_##fmt##_SIZE,                                   \
		       #type "." #field ": size differs from the kernel's format file")

CHECK(add_ctx, i_ino, ADD_I_INO);
CHECK(add_ctx, index, ADD_INDEX);
CHECK(add_ctx, s_dev, ADD_S_DEV);
CHECK(add_ctx, order, ADD_ORDER);
CHECK(issue_ctx, dev, ISSUE_DEV);
CHECK(issue_ctx, sector, ISSUE_SECTOR);
CHECK(issue_ctx, nr_sector, ISSUE_NR_SECTOR);
CHECK(issue_ctx, rwbs, ISSUE_RWBS);
CHECK(complete_ctx, dev, COMPLETE_DEV);
CHECK(complete_ctx, sector, COMPLETE_SECTOR);
CHECK(complete_ctx, nr_sector, COMPLETE_NR_SECTOR);
CHECK(complete_ctx, rwbs, COMPLETE_RWBS);

/* ---- maps -------------------------------------------------------------- */

struct file_key {
	__u64 ino;
	__u32 dev;
	__u32 pad;
};

struct add_key {
	__u64 ino;
	__u64 index;
	__u32 dev;
	__u32 order;
};

struct read_key {
	__u64 sector;
	__u32 dev;
	__u32 bytes;
};

struct bpf_map_def SEC("maps/files") files = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(struct file_key),
	.value_size = sizeof(__u32),
	.max_entries = 16,
};

/* [0]: the whole-disk device (kernel dev_t, major << 20 | minor) */
struct bpf_map_def SEC("maps/config") config = {
	.type = BPF_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u32),
	.max_entries = 1,
};

struct bpf_map_def SEC("maps/adds") adds = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(struct add_key),
	.value_size = sizeof(__u64),
	.max_entries = 65536,
};

struct bpf_map_def SEC("maps/reads") reads = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(struct read_key),
	.value_size = sizeof(__u64),
	.max_entries = 65536,
};

struct bpf_map_def SEC("maps/completes") completes = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(struct read_key),
	.value_size = sizeof(__u64),
	.max_entries = 65536,
};

struct bpf_map_def SEC("maps/dropped") dropped = {
	.type = BPF_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u64),
	.max_entries = 3,
};

INLINE void count(void *map, const void *key, __u32 drop_slot)
{
	__u64 one = 1, *n;

	n = bpf_map_lookup_elem(map, key);
	if (n) {
		__sync_fetch_and_add(n, 1);
		return;
	}
	if (bpf_map_update_elem(map, key, &one, BPF_NOEXIST) == 0)
		return;
	/* Another CPU inserted it meanwhile, or the map is full. */
	n = bpf_map_lookup_elem(map, key);
	if (!n)
		n = bpf_map_lookup_elem(&dropped, &drop_slot);
	if (n)
		__sync_fetch_and_add(n, 1);
}

SEC("tracepoint/filemap/mm_filemap_add_to_page_cache")
int on_page_add(struct add_ctx *ctx)
{
	struct file_key fk = {};
	struct add_key k = {};

	fk.ino = ctx->i_ino;
	fk.dev = ctx->s_dev;
	if (!bpf_map_lookup_elem(&files, &fk))
		return 0;
	k.ino = fk.ino;
	k.dev = fk.dev;
	k.index = ctx->index;
	k.order = ctx->order;
	count(&adds, &k, 0);
	return 0;
}

SEC("tracepoint/block/block_rq_issue")
int on_rq_issue(struct issue_ctx *ctx)
{
	struct read_key k = {};
	__u32 zero = 0, *dev;

	dev = bpf_map_lookup_elem(&config, &zero);
	if (!dev || ctx->dev != *dev)
		return 0;
	/* blk_fill_rwbs: the operation comes first, 'R' for REQ_OP_READ
	 * ('F' first only for a preflush, which reads never carry). */
	if (ctx->rwbs[0] != 'R')
		return 0;
	k.sector = ctx->sector;
	k.dev = ctx->dev;
	k.bytes = ctx->nr_sector * 512;
	count(&reads, &k, 1);
	return 0;
}

SEC("tracepoint/block/block_rq_complete")
int on_rq_complete(struct complete_ctx *ctx)
{
	struct read_key k = {};
	__u32 zero = 0, *dev;

	dev = bpf_map_lookup_elem(&config, &zero);
	if (!dev || ctx->dev != *dev)
		return 0;
	if (ctx->rwbs[0] != 'R')
		return 0;
	k.sector = ctx->sector;
	k.dev = ctx->dev;
	k.bytes = ctx->nr_sector * 512;
	count(&completes, &k, 2);
	return 0;
}

char _license[] SEC("license") = "GPL";
