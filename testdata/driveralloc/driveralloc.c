/*
 * driveralloc: an LD_PRELOAD allocator that places a process's large
 * posix_memalign buffers (ggml's CPU buffers: the compute buffer with the
 * graph's inputs, the KV cache) in the kinds of shared mappings a GPU
 * driver gives its host-visible memory, so that a CPU box reproduces
 * what a hybrid run on a real GPU looks like to a tracer: inp_tokens in a
 * file-backed mapping that is no model.
 *
 * DRIVERALLOC is a comma-separated list of kinds, used in turn:
 *   memfd      a memfd_create file, MAP_SHARED ("/memfd:... (deleted)")
 *   zero       /dev/zero, MAP_SHARED (shmem, "/dev/zero (deleted)")
 *   dev:PATH   a device node mapped MAP_SHARED at increasing offsets (a
 *              block device here: this VM has no mappable character
 *              device, /dev/nvidia0's kind)
 *   file:DIR   a regular file per buffer in DIR, MAP_SHARED, left linked
 * DRIVERALLOC_MIN is the smallest size placed (default 65536); smaller
 * requests, and any when DRIVERALLOC is unset, go to glibc. Each placed
 * buffer is told on stderr: "driveralloc: KIND SIZE".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_memalign(size_t align, size_t size);
extern void __libc_free(void *p);

#define MAX_BUFS 1024
#define MAX_KINDS 8

static struct {
	void *p;
	size_t len;
} bufs[MAX_BUFS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char kinds[MAX_KINDS][256];
static int nkinds = -1, next_kind;
static size_t min_size = 65536;
static off_t dev_off; /* the next free offset of the dev: kind's node */
static int file_seq;
static int hw; /* bufs[hw:] were never used */

static void parse_env(void)
{
	const char *env = getenv("DRIVERALLOC");
	const char *m = getenv("DRIVERALLOC_MIN");

	nkinds = 0;
	if (m)
		min_size = strtoull(m, NULL, 0);
	if (!env)
		return;
	while (*env && nkinds < MAX_KINDS) {
		size_t n = strcspn(env, ",");
		if (n >= sizeof(kinds[0]))
			n = sizeof(kinds[0]) - 1;
		memcpy(kinds[nkinds], env, n);
		kinds[nkinds++][n] = 0;
		env += n;
		if (*env == ',')
			env++;
	}
}

/* place maps len bytes of kind k; MAP_FAILED on failure. */
static void *place(const char *k, size_t len)
{
	void *p = MAP_FAILED;
	int fd = -1;
	off_t off = 0;

	if (strcmp(k, "memfd") == 0) {
		fd = memfd_create("ggml-host", MFD_CLOEXEC);
		if (fd >= 0 && ftruncate(fd, (off_t)len) != 0) {
			close(fd);
			fd = -1;
		}
	} else if (strcmp(k, "zero") == 0) {
		fd = open("/dev/zero", O_RDWR | O_CLOEXEC);
	} else if (strncmp(k, "dev:", 4) == 0) {
		fd = open(k + 4, O_RDWR | O_CLOEXEC);
		off = dev_off;
		dev_off += (off_t)len;
	} else if (strncmp(k, "file:", 5) == 0) {
		char path[512];
		snprintf(path, sizeof(path), "%s/buf-%d-%d", k + 5, (int)getpid(), file_seq++);
		fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd >= 0 && ftruncate(fd, (off_t)len) != 0) {
			close(fd);
			fd = -1;
		}
	}
	if (fd < 0)
		return MAP_FAILED;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
	close(fd);
	return p;
}

int posix_memalign(void **out, size_t align, size_t size)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t len;
	void *p;
	const char *k;
	int i;

	pthread_mutex_lock(&mu);
	if (nkinds < 0)
		parse_env();
	if (nkinds == 0 || size < min_size || align > (size_t)page) {
		pthread_mutex_unlock(&mu);
		p = __libc_memalign(align, size);
		if (!p)
			return ENOMEM;
		*out = p;
		return 0;
	}
	len = (size + (size_t)page - 1) & ~((size_t)page - 1);
	k = kinds[next_kind];
	next_kind = (next_kind + 1) % nkinds;
	p = place(k, len);
	for (i = 0; p != MAP_FAILED && i < MAX_BUFS; i++) {
		if (!bufs[i].p) {
			bufs[i].p = p;
			bufs[i].len = len;
			if (i >= hw)
				hw = i + 1;
			break;
		}
	}
	pthread_mutex_unlock(&mu);
	if (p == MAP_FAILED || i == MAX_BUFS) {
		/* A test that asked for a kind must know it was not given. */
		fprintf(stderr, "driveralloc: cannot place %zu bytes as %s: %s\n", size, k, strerror(errno));
		abort();
	}
	fprintf(stderr, "driveralloc: %s %zu\n", k, len);
	*out = p;
	return 0;
}

void free(void *p)
{
	int i;

	if (!p)
		return;
	pthread_mutex_lock(&mu);
	for (i = 0; i < hw; i++) {
		if (bufs[i].p == p) {
			munmap(p, bufs[i].len);
			bufs[i].p = NULL;
			pthread_mutex_unlock(&mu);
			return;
		}
	}
	pthread_mutex_unlock(&mu);
	__libc_free(p);
}
