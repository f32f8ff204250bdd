/*
 * execmapper: ground truth for the pauses of uprobe attaches. Each file
 * named is mapped executable (a file iocorr has not seen, so the kernel
 * side asks for a pause), in this order:
 *
 *   execmapper MAIN YOUNG OLD
 *
 * MAIN by the main thread, which the warden seized at the exec; YOUNG by
 * a thread at once after it starts, before the warden has seized it
 * unless the thread was kept from running for as long as the warden waits
 * (a loaded machine); OLD by a thread that first sleeps a second, by when
 * the warden has. It prints whether YOUNG's thread was traced when it
 * mapped it: "young free" (not before the mapping nor after it), "young
 * seized" (already before) or "young changed" (seized while it mapped). It
 * exits 0 when every mapping succeeded.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void map_exec(const char *path)
{
	int fd = open(path, O_RDONLY);
	void *p;

	if (fd < 0) {
		perror(path);
		exit(1);
	}
	p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	munmap(p, 4096);
	close(fd);
}

/* traced says whether the calling thread has a tracer now. */
static int traced(void)
{
	char path[64], line[256];
	int pid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", (long)syscall(SYS_gettid));
	f = fopen(path, "r");
	if (!f) {
		perror(path);
		exit(1);
	}
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "TracerPid: %d", &pid) == 1)
			break;
	fclose(f);
	return pid != 0;
}

static void *young(void *path)
{
	int before = traced(), after;

	map_exec(path);
	after = traced();
	printf("young %s\n", before ? "seized" : after ? "changed" : "free");
	return NULL;
}

static void *old(void *path)
{
	struct timespec ts = {1, 0};

	nanosleep(&ts, NULL);
	map_exec(path);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc != 4) {
		fprintf(stderr, "usage: execmapper MAIN YOUNG OLD\n");
		return 2;
	}
	map_exec(argv[1]);
	if (pthread_create(&t, NULL, young, argv[2]) || pthread_join(t, NULL))
		return 1;
	if (pthread_create(&t, NULL, old, argv[3]) || pthread_join(t, NULL))
		return 1;
	return 0;
}
