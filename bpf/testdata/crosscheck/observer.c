// SPDX-License-Identifier: GPL-2.0
/*
 * An independent observer for bpf/crosscheck_test.go. It watches the same
 * page-cache adds as iocorr's programs, but shares nothing with them:
 *
 *   - no vmlinux.h, no libbpf headers, no CO-RE: the context structs below
 *     are written by hand from the tracepoints' own format files
 *     (/sys/kernel/tracing/events/GROUP/NAME/format), and the test checks
 *     them against the running kernel's formats at compile time (the
 *     FMT_* macros it passes with -D, see the _Static_asserts);
 *   - classic tracepoints only;
 *   - loaded by iovisor/gobpf's own ELF loader (maps in "maps/NAME"
 *     sections with gobpf's struct bpf_map_def, programs in
 *     "tracepoint/GROUP/NAME" sections), not by cilium/ebpf.
 *
 * gobpf's loader only relocates map references (no BPF-to-BPF calls, no
 * .data/.rodata/.bss), so every helper is always_inline and there are no
 * global variables other than the maps.
 *
 * It records into a hash map that the test reads after the I/O:
 *   adds:      (dev, ino, index, order) -> count, for the files in `files`
 *   dropped:   [0] page adds that did not fit in it
 *
 * Block requests are not watched here: the test's oracle for them is an
 * ftrace instance (testkit/blocktrace), which records every completion,
 * also those that run no BPF program at all.
 */

typedef unsigned char __u8;
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

#define CHECK(type, field, fmt)                                                                                 \
	_Static_assert(__builtin_offsetof(struct type, field) == FMT_##fmt##_OFF,                               \
		       #type "." #field ": offset differs from the kernel's format file");                     \
	_Static_assert(sizeof(((struct type *)0)->field) == FMT_##fmt##_SIZE,                                   \
		       #type "." #field ": size differs from the kernel's format file")

CHECK(add_ctx, i_ino, ADD_I_INO);
CHECK(add_ctx, index, ADD_INDEX);
CHECK(add_ctx, s_dev, ADD_S_DEV);
CHECK(add_ctx, order, ADD_ORDER);

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

struct bpf_map_def SEC("maps/files") files = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(struct file_key),
	.value_size = sizeof(__u32),
	.max_entries = 16,
};

struct bpf_map_def SEC("maps/adds") adds = {
	.type = BPF_MAP_TYPE_HASH,
	.key_size = sizeof(struct add_key),
	.value_size = sizeof(__u64),
	.max_entries = 65536,
};

struct bpf_map_def SEC("maps/dropped") dropped = {
	.type = BPF_MAP_TYPE_ARRAY,
	.key_size = sizeof(__u32),
	.value_size = sizeof(__u64),
	.max_entries = 1,
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

char _license[] SEC("license") = "GPL";
