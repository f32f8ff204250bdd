/*
 * bufnamer: names buffers as ggml does, with each name a string in a page
 * of a file mapping the process has not touched when
 * ggml_backend_buffer_name returns it (ggml's "CPU_Mapped" is a literal in
 * libggml-base's .rodata, and a page of it may be unmapped then). The
 * caller prints each name right after the call, as llama.cpp logs it,
 * which maps the page (and, by fault-around, the file's other pages).
 *
 * usage: bufnamer FILE NAME...   (writes FILE, one page per name)
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static char *names;
static long page;

__attribute__((noinline)) const char *ggml_backend_buffer_name(void *buffer)
{
	return names + (long)buffer * page;
}

int main(int argc, char **argv)
{
	int n = argc - 2, fd;
	char *buf;

	if (n < 1) {
		fprintf(stderr, "usage: bufnamer FILE NAME...\n");
		return 2;
	}
	page = sysconf(_SC_PAGESIZE);
	buf = calloc(n + 1, page);
	for (int i = 0; i < n; i++)
		strncpy(buf + (i + 1) * page, argv[i + 2], page - 1);
	fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, buf, (n + 1) * page) != (n + 1) * page || fsync(fd) != 0) {
		perror(argv[1]);
		return 1;
	}
	/* Out of the page cache, so that nothing maps it before its use. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	names = mmap(NULL, (n + 1) * page, PROT_READ, MAP_PRIVATE, fd, 0);
	if (names == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	madvise(names, (n + 1) * page, MADV_RANDOM);
	for (long b = 1; b <= n; b++)
		printf("%s\n", ggml_backend_buffer_name((void *)b));
	return 0;
}
