/*
 * mapchurn: ground truth for the pauses of uprobe attaches in a process
 * whose other threads change its mappings. A second thread maps and
 * unmaps a page of anonymous memory in a loop (each call holds the mmap
 * lock for writing, as an allocator's do); meanwhile the main thread maps
 * each file named executable, in order, as a dlopen does:
 *
 *   mapchurn FILE...
 *
 * Each file is one iocorr has not seen, so each mapping asks for a
 * pause. It prints how many map-and-unmap rounds ran while the files were
 * mapped, and exits 0 when every mapping succeeded.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static atomic_int stop;
static atomic_long rounds;

static void *churn(void *arg)
{
	(void)arg;
	while (!atomic_load(&stop)) {
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (p == MAP_FAILED) {
			perror("mmap");
			exit(1);
		}
		munmap(p, 4096);
		atomic_fetch_add(&rounds, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	long before;

	if (argc < 2) {
		fprintf(stderr, "usage: mapchurn FILE...\n");
		return 2;
	}
	if (pthread_create(&t, NULL, churn, NULL))
		return 1;
	/* The churn runs before the first mapping. */
	while (atomic_load(&rounds) < 1000)
		;
	before = atomic_load(&rounds);
	for (int i = 1; i < argc; i++) {
		int fd = open(argv[i], O_RDONLY);
		void *p;

		if (fd < 0) {
			perror(argv[i]);
			return 1;
		}
		p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		munmap(p, 4096);
		close(fd);
	}
	printf("%ld\n", atomic_load(&rounds) - before);
	atomic_store(&stop, 1);
	return pthread_join(t, NULL) ? 1 : 0;
}
