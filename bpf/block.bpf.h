/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Block requests: issue and completion paired by request in blk_starts,
 * one record at completion, of the bytes completed. Filtered by device
 * and by iocorr's own writes. A requeued request (the device refused it:
 * this VM's virtio disk requeues about one issue in three under memory
 * pressure) leaves blk_starts: it is counted at the completion of its
 * last issue, whatever its size then (the scheduler may have merged more
 * into it meanwhile). A request whose completion never reached BPF is
 * still recorded, from its issue, with its completion marked unseen
 * (block__emit_unseen).
 */

struct blk_start {
	struct event_hdr hdr; /* the issue's stamp: hdr.ts is the issue time */
	__u64 sector;
	__u32 dev;
	__u32 bytes;
	__u32 cmd_flags;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} devs SEC(".maps");

/* Requests issued and not yet completed, by struct request pointer. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct blk_start);
} blk_starts SEC(".maps");

/* Requests recorded with their completion unseen (block__emit_unseen). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} blk_unseen SEC(".maps");

/* Requeues seen (block_requeue): what a run's exactness rests on. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} blk_requeues SEC(".maps");

/* block__fill writes what a block record says of its request. */
static __always_inline void block__fill(struct block_event *e, const struct blk_start *bs, __s32 error)
{
	e->issue_ts = bs->hdr.ts;
	e->sector = bs->sector;
	e->dev = bs->dev;
	e->bytes = bs->bytes;
	e->cmd_flags = bs->cmd_flags;
	e->error = error;
}

/* block__emit_unseen records a request whose completion BPF never saw:
 * stamped as at its issue, but timed now (the ring stays in time order),
 * with no latency, and error BLOCK_COMPLETION_UNSEEN saying so. On this
 * VM a completion now and then reaches ftrace and no BPF program at all,
 * with no recursion miss counted (bpf/crosscheck_test.go); its bytes were
 * read all the same. */
static __always_inline void block__emit_unseen(struct blk_start *bs)
{
	struct block_event *e = ring__reserve(sizeof(*e), EV_BLOCK);
	__u32 zero = 0;
	__u64 *n;

	if (!e)
		return;
	e->hdr = bs->hdr;
	e->hdr.ts = bpf_ktime_get_ns();
	block__fill(e, bs, BLOCK_COMPLETION_UNSEEN);
	ring__submit(e, EV_BLOCK);
	n = bpf_map_lookup_elem(&blk_unseen, &zero);
	if (n)
		*n += 1;
}

static __always_inline __u32 rq__dev(struct request *rq)
{
	struct gendisk *disk = BPF_CORE_READ(rq, q, disk);

	if (!disk)
		return 0;
	return ((__u32)BPF_CORE_READ(disk, major) << 20) | (__u32)BPF_CORE_READ(disk, first_minor);
}

/* The operation of a block request is the low byte of cmd_flags
 * (REQ_OP_MASK); REQ_OP_READ is 0 (include/linux/blk_types.h). User space
 * decodes the same byte with internal/kernel.BlockOpOf. */
static __always_inline bool rq__is_read(__u32 cmd_flags)
{
	return (cmd_flags & 0xff) == 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(block_issue, struct request *rq)
{
	struct blk_start bs = {};
	struct blk_start *old;
	__u64 key = (__u64)rq;

	bs.cmd_flags = BPF_CORE_READ(rq, cmd_flags);
	/* iocorr's own writes (the spool) are not the child's I/O. Its reads
	 * (library symbols read while the command runs, after a cache drop)
	 * are kept: the device's read total must add up to what diskstats
	 * says. 0 means no filter: requests issued from softirq on an idle
	 * CPU run as the idle task, whose tgid is 0. */
	if (cfg.self_tgid && (bpf_get_current_pid_tgid() >> 32) == cfg.self_tgid && !rq__is_read(bs.cmd_flags))
		return 0;
	bs.dev = rq__dev(rq);
	if (cfg.filter_devs && !bpf_map_lookup_elem(&devs, &bs.dev))
		return 0;
	bs.sector = BPF_CORE_READ(rq, __sector);
	bs.bytes = BPF_CORE_READ(rq, __data_len);
	/* A request is issued again after its completion, or after a requeue,
	 * which block_requeue takes out of blk_starts. Where that program is
	 * not attached (caps.go's fallback), a request issued again with the
	 * same sector and size, no completion between, is taken for a requeue;
	 * any other request still held here is one whose completion BPF never
	 * saw. */
	old = bpf_map_lookup_elem(&blk_starts, &key);
	if (old && (old->sector != bs.sector || old->bytes != bs.bytes || old->dev != bs.dev))
		block__emit_unseen(old);
	hdr__fill(&bs.hdr, EV_BLOCK);
	bpf_map_update_elem(&blk_starts, &key, &bs, BPF_ANY);
	return 0;
}

SEC("tp_btf/block_rq_requeue")
int BPF_PROG(block_requeue, struct request *rq)
{
	__u64 key = (__u64)rq;
	__u32 zero = 0;
	__u64 *n;

	if (bpf_map_delete_elem(&blk_starts, &key) == 0) {
		n = bpf_map_lookup_elem(&blk_requeues, &zero);
		if (n)
			*n += 1;
	}
	return 0;
}

/* A completion may be partial (blk_update_request with fewer bytes than
 * the request holds): the record has the bytes completed, from the
 * request's current sector, and the rest stays for the next completion. */
SEC("tp_btf/block_rq_complete")
int BPF_PROG(block_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct blk_start *bs = bpf_map_lookup_elem(&blk_starts, &key);
	struct block_event *e;
	bool partial;

	if (!bs)
		return 0;
	partial = nr_bytes && nr_bytes < bs->bytes;
	e = event__reserve(sizeof(*e), EV_BLOCK);
	if (e) {
		block__fill(e, bs, error);
		if (partial)
			e->bytes = nr_bytes;
		ring__submit(e, EV_BLOCK);
	}
	if (partial) {
		bs->sector += nr_bytes >> 9;
		bs->bytes -= nr_bytes;
		return 0;
	}
	bpf_map_delete_elem(&blk_starts, &key);
	return 0;
}
