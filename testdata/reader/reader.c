/*
 * reader: ground truth for iocorr's read tracing. It reads byte ranges of
 * a file with the syscall named for each, in order, and exits non-zero if
 * any read returns less than asked (so the test's plan is exactly what
 * was read).
 *
 *   reader FILE [-direct] KIND:OFFSET:LENGTH ...
 *
 * KIND is read (lseek, then read), pread64, readv (lseek, then two iovecs),
 * preadv (two iovecs), preadv2 (two iovecs), preadv2cur (lseek, then
 * preadv2 at offset -1: the file position), or uring (one IORING_OP_READ
 * through a ring set up with raw syscalls: no liburing needed).
 * -direct opens the file O_DIRECT (offsets and lengths must be aligned).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	exit(1);
}

static ssize_t uring_read(int fd, void *buf, size_t len, off_t off)
{
	struct io_uring_params p;
	memset(&p, 0, sizeof(p));
	int ring = syscall(__NR_io_uring_setup, 1, &p);
	if (ring < 0)
		die("io_uring_setup");
	size_t sq_len = p.sq_off.array + p.sq_entries * sizeof(unsigned);
	size_t cq_len = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	char *sq = mmap(NULL, sq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING);
	char *cq = mmap(NULL, cq_len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING);
	struct io_uring_sqe *sqes = mmap(NULL, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
					 MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED)
		die("mmap ring");
	unsigned *tail = (unsigned *)(sq + p.sq_off.tail), *mask = (unsigned *)(sq + p.sq_off.ring_mask);
	unsigned *array = (unsigned *)(sq + p.sq_off.array);
	unsigned idx = *tail & *mask;
	memset(&sqes[idx], 0, sizeof(sqes[idx]));
	sqes[idx].opcode = IORING_OP_READ;
	sqes[idx].fd = fd;
	sqes[idx].addr = (uint64_t)(uintptr_t)buf;
	sqes[idx].len = len;
	sqes[idx].off = off;
	array[idx] = idx;
	__atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
	if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0)
		die("io_uring_enter");
	unsigned *head = (unsigned *)(cq + p.cq_off.head);
	struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
	unsigned cmask = *(unsigned *)(cq + p.cq_off.ring_mask);
	int res = cqes[*head & cmask].res;
	__atomic_store_n(head, *head + 1, __ATOMIC_RELEASE);
	close(ring);
	return res;
}

int main(int argc, char **argv)
{
	int flags = O_RDONLY, first = 2;
	if (argc < 3)
		die("usage: reader FILE [-direct] KIND:OFFSET:LENGTH ...");
	if (!strcmp(argv[2], "-direct")) {
		flags |= O_DIRECT;
		first = 3;
	}
	int fd = open(argv[1], flags);
	if (fd < 0)
		die("open");
	for (int i = first; i < argc; i++) {
		char kind[16];
		long long off, len;
		if (sscanf(argv[i], "%15[^:]:%lld:%lld", kind, &off, &len) != 3 || len <= 0)
			die("bad read spec");
		char *buf;
		if (posix_memalign((void **)&buf, 4096, len))
			die("posix_memalign");
		struct iovec iov[2] = {{buf, len / 2}, {buf + len / 2, len - len / 2}};
		ssize_t got;
		if (!strcmp(kind, "read") || !strcmp(kind, "readv") || !strcmp(kind, "preadv2cur")) {
			if (lseek(fd, off, SEEK_SET) != off)
				die("lseek");
		}
		if (!strcmp(kind, "read"))
			got = read(fd, buf, len);
		else if (!strcmp(kind, "pread64"))
			got = pread(fd, buf, len, off);
		else if (!strcmp(kind, "readv"))
			got = readv(fd, iov, 2);
		else if (!strcmp(kind, "preadv"))
			got = preadv(fd, iov, 2, off);
		else if (!strcmp(kind, "preadv2"))
			got = preadv2(fd, iov, 2, off, 0);
		else if (!strcmp(kind, "preadv2cur"))
			got = preadv2(fd, iov, 2, -1, 0);
		else if (!strcmp(kind, "uring"))
			got = uring_read(fd, buf, len, off);
		else
			die("unknown kind");
		if (got != len) {
			fprintf(stderr, "reader: %s at %lld: %zd of %lld bytes\n", kind, off, got, len);
			return 1;
		}
		free(buf);
	}
	return 0;
}
