/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Reads that fault nothing: read(2), pread64(2), readv(2), preadv(2),
 * preadv2(2) and io_uring reads of a model file by a traced process, as
 * llama.cpp's --load-mode none (buffered reads) and dio (O_DIRECT) load
 * weights. Entry and return are paired by thread (by request for
 * io_uring); only calls that returned bytes are recorded.
 */

struct read_start {
	__u64 ts;
	__u64 ino;
	__u64 off;
	__u32 dev;
	__u16 kind;
	__u16 direct;
	/* io_uring completes elsewhere: the submitter's stamp goes along */
	__u32 tgid;
	__u32 tid;
	__u32 token;
	__u32 op;
	__u8 phase;
	__u8 pad[7];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* tid, or the io_kiocb pointer */
	__type(value, struct read_start);
} read_starts SEC(".maps");

/* read__start fills rs for a read of kind from fd: the file, where the
 * read begins and when; false when fd is not a model file. pos < 0 means
 * the file position (read, readv, preadv2 with -1). */
static __always_inline bool read__start(struct read_start *rs, __u16 kind, __u32 fd, __s64 pos)
{
	struct file *f = fd__file(fd);
	struct inode *inode;

	if (!f)
		return false;
	inode = BPF_CORE_READ(f, f_inode);
	rs->ino = BPF_CORE_READ(inode, i_ino);
	rs->dev = BPF_CORE_READ(inode, i_sb, s_dev);
	if (!file__is_model(rs->dev, rs->ino))
		return false;
	rs->off = pos >= 0 ? (__u64)pos : (__u64)BPF_CORE_READ(f, f_pos);
	rs->direct = (BPF_CORE_READ(f, f_flags) & O_DIRECT_FLAG) != 0;
	rs->ts = bpf_ktime_get_ns();
	rs->kind = kind;
	return true;
}

static __always_inline int read__enter(__u16 kind, __u32 fd, __s64 pos)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct read_start rs = {};
	__u64 tid = (__u32)id;

	if (!proc__is_traced(id >> 32))
		return 0;
	if (!read__start(&rs, kind, fd, pos))
		return 0;
	bpf_map_update_elem(&read_starts, &tid, &rs, BPF_ANY);
	return 0;
}

static __always_inline void read__emit(struct read_start *rs, __s64 ret, bool restamp)
{
	struct read_event *e;

	if (ret <= 0)
		return;
	e = event__reserve(sizeof(*e), EV_READ);
	if (!e)
		return;
	if (restamp) {
		e->hdr.tgid = rs->tgid;
		e->hdr.tid = rs->tid;
		e->hdr.token = rs->token;
		e->hdr.op = rs->op;
		e->hdr.phase = rs->phase;
	}
	e->start_ts = rs->ts;
	e->ino = rs->ino;
	e->offset = rs->off;
	e->bytes = ret;
	e->dev = rs->dev;
	e->kind = rs->kind;
	e->direct = rs->direct;
	ring__submit(e, EV_READ);
}

static __always_inline int read__exit(long ret)
{
	__u64 tid = (__u32)bpf_get_current_pid_tgid();
	struct read_start *rs = bpf_map_lookup_elem(&read_starts, &tid);

	if (!rs)
		return 0;
	read__emit(rs, ret, false);
	bpf_map_delete_elem(&read_starts, &tid);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_read")
int read_enter_read(struct sys_enter_args *ctx) { return read__enter(READ_READ, ctx->args[0], -1); }
SEC("tracepoint/syscalls/sys_enter_pread64")
int read_enter_pread64(struct sys_enter_args *ctx) { return read__enter(READ_PREAD64, ctx->args[0], ctx->args[3]); }
SEC("tracepoint/syscalls/sys_enter_readv")
int read_enter_readv(struct sys_enter_args *ctx) { return read__enter(READ_READV, ctx->args[0], -1); }
/* preadv's pos_l holds the whole offset on 64-bit (pos_h shifts out). */
SEC("tracepoint/syscalls/sys_enter_preadv")
int read_enter_preadv(struct sys_enter_args *ctx) { return read__enter(READ_PREADV, ctx->args[0], ctx->args[3]); }
/* preadv2 with offset -1 reads at the file position. */
SEC("tracepoint/syscalls/sys_enter_preadv2")
int read_enter_preadv2(struct sys_enter_args *ctx) { return read__enter(READ_PREADV2, ctx->args[0], (__s64)ctx->args[3]); }

SEC("tracepoint/syscalls/sys_exit_read")
int read_exit_read(struct sys_exit_args *ctx) { return read__exit(ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_pread64")
int read_exit_pread64(struct sys_exit_args *ctx) { return read__exit(ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_readv")
int read_exit_readv(struct sys_exit_args *ctx) { return read__exit(ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_preadv")
int read_exit_preadv(struct sys_exit_args *ctx) { return read__exit(ctx->ret); }
SEC("tracepoint/syscalls/sys_exit_preadv2")
int read_exit_preadv2(struct sys_exit_args *ctx) { return read__exit(ctx->ret); }

/* IORING_OP_* of the reads (uapi linux/io_uring.h). */
#define IORING_OP_READV_ 1
#define IORING_OP_READ_FIXED_ 4
#define IORING_OP_READ_ 22

/* A read request as io_uring submits it: prep has set the offset (the
 * request's command is a struct io_rw); the file is resolved from the
 * SQE's fd, as io_uring itself does later. Registered (fixed) files are
 * indexes into the ring's table, not fds: those are counted as lost. */
SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(uring_submit, struct io_kiocb *req)
{
	__u64 id = bpf_get_current_pid_tgid(), key = (__u64)req;
	struct io_rw *rw = (void *)req;
	struct read_start rs = {};
	struct event_hdr h;
	__u8 op = BPF_CORE_READ(req, opcode);
	__s64 pos;

	if (op != IORING_OP_READ_ && op != IORING_OP_READV_ && op != IORING_OP_READ_FIXED_)
		return 0;
	if (!proc__is_traced(id >> 32))
		return 0;
	if (BPF_CORE_READ(req, flags) & REQ_F_FIXED_FILE) {
		ring__lost(EV_READ);
		return 0;
	}
	pos = BPF_CORE_READ(rw, kiocb.ki_pos);
	if (!read__start(&rs, READ_IO_URING, BPF_CORE_READ(req, cqe.fd), pos))
		return 0;
	/* The completion runs elsewhere: the read carries the stamp that an
	 * event of the submitter has now. */
	hdr__fill(&h, EV_READ);
	rs.tgid = h.tgid;
	rs.tid = h.tid;
	rs.token = h.token;
	rs.op = h.op;
	rs.phase = h.phase;
	bpf_map_update_elem(&read_starts, &key, &rs, BPF_ANY);
	return 0;
}

SEC("tp_btf/io_uring_complete")
int BPF_PROG(uring_complete, struct io_ring_ctx *ring, void *req, struct io_uring_cqe *cqe)
{
	__u64 key = (__u64)req;
	struct read_start *rs = bpf_map_lookup_elem(&read_starts, &key);

	if (!rs)
		return 0;
	read__emit(rs, BPF_CORE_READ(cqe, res), true);
	bpf_map_delete_elem(&read_starts, &key);
	return 0;
}
