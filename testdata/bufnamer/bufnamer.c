/*
 * bufnamer: names buffers as ggml does, with each name a string in a page
 * of a file mapping the process has not touched when
 * ggml_backend_buffer_name returns it (ggml's "CPU_Mapped" is a literal in
 * libggml-base's .rodata, and a page of it may be unmapped then). The
 * caller prints each name right after the call, as llama.cpp logs it,
 * which maps the page (and, by fault-around, the file's other pages) —
 * but the last: nothing touches it after its call, so its name is still
 * unread when the process ends. A second thread then names one more
 * buffer whose name lies in anonymous memory never touched (as a GPU
 * backend's name is on the heap): no file holds it.
 *
 * The names lie 256 KiB apart, beyond the readahead of the recorder's
 * look at the file's first bytes (is it a model?) and the fault-around of
 * the fault on another name's page: either would map a name's page
 * before its use.
 *
 * Before naming, it maps MODEL (a GGUF file: the recorder snapshots the
 * process's maps when it sees a model mapped, which is where it finds the
 * names' file at the end), then maps its own executable for execution,
 * which the kernel stops it at until the recorder has handled every event
 * before (the snapshot among them): the stop is held only for a thread
 * older than 100 ms, hence the sleep.
 *
 * usage: bufnamer FILE MODEL NAME...   (writes FILE, 256 KiB per name)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static const char **name_of;

__attribute__((noinline)) const char *ggml_backend_buffer_name(void *buffer)
{
	return name_of[(long)buffer];
}

static void *name_unbacked(void *buffer)
{
	/* Returned, never read: the page stays unmapped. */
	__asm__ volatile("" : : "r"(ggml_backend_buffer_name(buffer)) : "memory");
	return NULL;
}

static int map_file(const char *path, int prot, size_t len)
{
	int fd = open(path, O_RDONLY);

	if (fd < 0 || mmap(NULL, len, prot, MAP_PRIVATE, fd, 0) == MAP_FAILED) {
		perror(path);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc - 3, fd;
	long page = sysconf(_SC_PAGESIZE), stride = 256 << 10;
	char *buf, *names, *anon;
	pthread_t th;

	if (n < 1) {
		fprintf(stderr, "usage: bufnamer FILE MODEL NAME...\n");
		return 2;
	}
	buf = calloc(n + 1, stride);
	name_of = calloc(n + 2, sizeof(*name_of));
	for (int i = 0; i < n; i++)
		strncpy(buf + (i + 1) * stride, argv[i + 3], page - 1);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, buf, (n + 1) * stride) != (n + 1) * stride || fsync(fd) != 0) {
		perror(argv[1]);
		return 1;
	}
	/* Out of the page cache, so that nothing maps it before its use. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	names = mmap(NULL, (n + 1) * stride, PROT_READ, MAP_PRIVATE, fd, 0);
	anon = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (names == MAP_FAILED || anon == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	madvise(names, (n + 1) * stride, MADV_RANDOM);
	for (long b = 1; b <= n; b++)
		name_of[b] = names + b * stride;
	name_of[n + 1] = anon;
	if (map_file(argv[2], PROT_READ, page) != 0)
		return 1;
	usleep(200 * 1000);
	if (map_file("/proc/self/exe", PROT_READ | PROT_EXEC, page) != 0)
		return 1;
	for (long b = 1; b < n; b++)
		printf("%s\n", ggml_backend_buffer_name((void *)b));
	fflush(stdout);
	/* The last name is returned, never read. */
	__asm__ volatile("" : : "r"(ggml_backend_buffer_name((void *)(long)n)) : "memory");
	if (pthread_create(&th, NULL, name_unbacked, (void *)(long)(n + 1)) != 0 || pthread_join(th, NULL) != 0) {
		fprintf(stderr, "bufnamer: a thread failed\n");
		return 1;
	}
	return 0;
}
