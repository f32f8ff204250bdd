package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/sweep"
)

// spawnerC creates N threads (pthread_create, then join), N processes
// (fork, then the child exits) or N exec'ed processes (fork, then exec of
// itself, statically linked: no library is mapped, so no pause for a
// uprobe attach is in the figure), one at a time, and prints the time the
// loop took in nanoseconds (CLOCK_MONOTONIC): the program's start, and
// iocorr's, are outside it.
const spawnerC = `#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void *nop(void *a) { return a; }

int main(int argc, char **argv)
{
	struct timespec a, b;
	int n;

	if (argc == 2 && !strcmp(argv[1], "exit"))
		return 0;
	if (argc != 3)
		return 2;
	n = atoi(argv[2]);
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++) {
		if (!strcmp(argv[1], "threads")) {
			pthread_t t;
			if (pthread_create(&t, NULL, nop, NULL) || pthread_join(t, NULL))
				return 1;
			continue;
		}
		pid_t p = fork();
		if (p < 0)
			return 1;
		if (p == 0) {
			if (!strcmp(argv[1], "execs"))
				execl("/proc/self/exe", argv[0], "exit", (char *)NULL);
			_exit(0);
		}
		int st;
		if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%lld\n", (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec));
	return 0;
}
`

// Warden prices the ptrace warden: every process a traced command starts
// stops in the warden (PTRACE_EVENT_FORK, the new task's first stop,
// PTRACE_EVENT_EXEC) and waits for it to resume it; a thread does not
// stop (the warden seizes the threads still running ~100 ms after they
// start), and costs its event to the recorder. A program starting N
// threads, N processes and N exec'ed processes one at a time runs
// untraced and under `iocorr record` in interleaved rounds; the
// difference of its own loop time, per task, is the figure (it holds the
// kernel's fork/exec/exit hooks too, a few µs of it).
func Warden(r *Report, cfg Config) {
	const sec = "warden"
	bin, err := buildSpawner(cfg)
	kinds := []struct{ mode, what string }{
		{"threads", "thread created and joined"},
		{"forks", "process forked and reaped"},
		{"execs", "process forked, exec'ed and reaped"},
	}
	if err != nil {
		for _, k := range kinds {
			r.NA(sec, "cost per "+k.what+" (traced - untraced)", "us", orNA(err))
		}
		return
	}
	n, rounds := 2000, max(cfg.Pairs, 3)
	if cfg.Short {
		n, rounds = 200, 2
	}
	for _, k := range kinds {
		var base, extra []float64
		var na string
		for i := range rounds {
			u, err := spawnerNS(bin, k.mode, n, nil)
			if err != nil {
				na = orNA(err)
				break
			}
			dir := filepath.Join(cfg.WorkDir, fmt.Sprintf("warden-%s-%d", k.mode, i))
			tr, err := spawnerNS(bin, k.mode, n, []string{cfg.Iocorr, "record", "--no-ingest", "--force", "-o", dir, "--"})
			if err != nil {
				na = orNA(err)
				break
			}
			base = append(base, u/float64(n)/1e3)
			extra = append(extra, (tr-u)/float64(n)/1e3)
			os.RemoveAll(dir)
		}
		logf(cfg, "warden %s: untraced %v us, traced extra %v us per task", k.mode, base, extra)
		r.Add(sec, "untraced: per "+k.what, "us", base, na)
		r.Add(sec, "cost per "+k.what+" (traced - untraced)", "us", extra, na)
	}
}

// buildSpawner compiles spawnerC, statically linked, into the work
// directory.
func buildSpawner(cfg Config) (string, error) {
	src := filepath.Join(cfg.WorkDir, "spawner.c")
	bin := filepath.Join(cfg.WorkDir, "spawner")
	if err := os.WriteFile(src, []byte(spawnerC), 0o644); err != nil {
		return "", err
	}
	cmd := exec.Command("cc", "-O2", "-static", "-pthread", "-o", bin, src)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling the spawner: %w: %s", err, sweep.LastLine(out))
	}
	return bin, nil
}

// spawnerNS runs the spawner, under the command prefix when one is
// given, and returns its loop time.
func spawnerNS(bin, mode string, n int, prefix []string) (float64, error) {
	argv := append(append([]string(nil), prefix...), bin, mode, strconv.Itoa(n))
	cmd := exec.Command(argv[0], argv[1:]...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, sweep.LastLine(errb.Bytes()))
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
	if err != nil {
		return 0, fmt.Errorf("the spawner printed %q: %w", out.String(), err)
	}
	return v, nil
}
