package launch

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// wrapperScript is a parent that starts its argv, waits for it with
// WUNTRACED, as a job-control shell or `perf trace` does, and prints each
// stop it sees and how the child ended; a stop is continued, so that the
// command runs on.
const wrapperScript = `
use POSIX ":sys_wait_h"; $| = 1;
my $pid = fork();
if ($pid == 0) { exec @ARGV or exit 127; }
while (1) {
	waitpid($pid, WUNTRACED) == $pid or die "waitpid: $!";
	my $st = ${^CHILD_ERROR_NATIVE};
	if (WIFSTOPPED($st)) { print "stopped ", WSTOPSIG($st), "\n"; kill "CONT", $pid; next; }
	print "exited ", (WIFEXITED($st) ? WEXITSTATUS($st) : 128 + WTERMSIG($st)), "\n";
	exit 0;
}
`

// TestWardenLeavesTheFamilyAsItWouldRun runs commands under a parent that
// waits with WUNTRACED, the whole family held by the warden from the
// first instruction: forks, execs, signals, exit codes and real stops
// are what they would be untraced.
func TestWardenLeavesTheFamilyAsItWouldRun(t *testing.T) {
	testenv.RequireRoot(t)
	tests := []struct {
		name string
		cmd  string
		want string
		warn string // what the warden says, if anything
	}{
		{"exit status passes through a fork and an exec", "exit 3", "exited 3\n", ""},
		{"a grandchild's output and status", "sh -c 'echo hi; exit 4'; exit $?", "hi\nexited 4\n", ""},
		{"a signal the command sends itself kills it", "kill -TERM $$", "exited 143\n", ""},
		{"a handled signal reaches its handler", "trap 'echo caught; exit 5' USR1; kill -USR1 $$; sleep 5", "caught\nexited 5\n", ""},
		{"a real stop is still seen by the parent", "kill -STOP $$; echo resumed", "stopped 19\nresumed\nexited 0\n",
			"was stopped by a signal from elsewhere: it is no longer held invisibly"},
		{"threads of a process run and end untouched", "perl -e 'use threads; threads->create(sub{1})->join for 1..3; exit 6' 2>/dev/null || exit 6", "exited 6\n", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c, err := StartHeld([]string{"perl", "-e", wrapperScript, "sh", "-c", tc.cmd}, nil, &out, os.Stderr, nil)
			if err != nil {
				t.Fatal(err)
			}
			var warnings []string
			w, err := StartWarden(func(s string) { warnings = append(warnings, s) })
			if err != nil {
				c.Abort()
				t.Fatal(err)
			}
			if err := w.Seize(c.PID()); err != nil {
				c.Abort()
				w.Close()
				t.Fatal(err)
			}
			if err := c.Release(); err != nil {
				t.Fatal(err)
			}
			if !c.WaitTimeout(20e9) {
				c.Signal(os.Kill)
				t.Fatalf("the command did not end in 20s; output so far %q", out.String())
			}
			ex := c.Wait()
			st, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range warnings {
				t.Log(w)
			}
			if got := out.String(); got != tc.want || ex.Code != 0 {
				t.Errorf("the wrapper printed %q and exited %d, want %q and 0", got, ex.Code, tc.want)
			}
			warned := strings.Join(warnings, "; ")
			if st.Held != 0 || (tc.warn == "") != (warned == "") || !strings.Contains(warned, tc.warn) {
				t.Errorf("the warden held %d pauses (none asked) and warned %q, want %q", st.Held, warned, tc.warn)
			}
		})
	}
}

// TestWardenSleepsWhileTheCommandStartsThreads has the warden told of a
// new thread every 5 ms, as the recorder tells it for node-llama-cpp,
// which starts its compute threads for every token (~200 a second here):
// the warden must not wake for each of them. Every wake of iocorr's
// processes lands on the CPUs the command runs on: a warden that woke
// over a thousand times a second kept this VM's idle vCPUs from halting,
// and so changed how fast the traced program ran (docs/overhead.md,
// session 14).
func TestWardenSleepsWhileTheCommandStartsThreads(t *testing.T) {
	testenv.RequireRoot(t)
	c, err := StartHeld([]string{"sleep", "10"}, nil, io.Discard, os.Stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		c.Signal(os.Kill)
		c.Wait()
	}()
	w, err := StartWarden(func(s string) { t.Log(s) })
	if err != nil {
		c.Abort()
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Seize(c.PID()); err != nil {
		t.Fatal(err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	const (
		span  = 2 * time.Second
		every = 5 * time.Millisecond
		// One request and one rescan a rescanDelay, each a few wakes of
		// the Go runtime's threads: ~165 a second here, against 3,400
		// when every request was sent, read by a goroutine blocked in
		// read(2) and followed by a tick every 50 ms.
		maxPerSecond = 400
	)
	before, err := wakes(w.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < span {
		if err := w.SeizeThreads(c.PID()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(every)
	}
	after, err := wakes(w.cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	perSecond := float64(after-before) / time.Since(start).Seconds()
	t.Logf("the warden woke %d times in %s (%.0f a second) for %d requests", after-before, time.Since(start).Round(time.Millisecond), perSecond, int(span/every))
	if perSecond > maxPerSecond {
		t.Errorf("the warden woke %.0f times a second while told of a new thread every %s, want at most %d", perSecond, every, maxPerSecond)
	}
}

// wakes sums the context switches of every thread of process pid
// (voluntary and not), as /proc counts them.
func wakes(pid int) (int, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue // a thread that ended meanwhile
		}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "voluntary_ctxt_switches") {
				c, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					return 0, fmt.Errorf("reading %s of thread %s: %w", k, task.Name(), err)
				}
				n += c
			}
		}
	}
	return n, nil
}

// TestWardenHoldsAPauseThatBeganWhileItSeized is the launcher's first
// pause on a loaded machine: the kernel side stops it (a group stop: the
// warden holds nothing of it yet) after the warden listed its thread and
// before the seize. That stop is the pause the recorder will release, and
// is held as one; taken for someone else's stop, it let the whole process
// go, and every later pause of it was a SIGSTOP its parent could see.
func TestWardenHoldsAPauseThatBeganWhileItSeized(t *testing.T) {
	testenv.RequireRoot(t)
	// Every ptrace request must come from the thread that seized.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	var out bytes.Buffer
	w := newWarden(&out)
	defer func() {
		w.detachAll()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	w.beforeSeize = func(tid int) {
		unix.Kill(pid, unix.SIGSTOP)
		waitFor(t, "the stop", func() bool { return proc.State(tid) == 'T' })
	}
	if err := w.seize(pid); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the stop's report", func() bool {
		w.poll()
		return w.nHeld > 0 || w.leaving[pid]
	})
	if w.leaving[pid] || w.nHeld != 1 {
		t.Fatalf("the stop was taken for someone else's (leaving %v, %d held); the warden said %q", w.leaving[pid], w.nHeld, out.String())
	}
	w.release(pid)
	// The SIGCONT that ends the group stop is passed on at its delivery.
	waitFor(t, "the process to run on", func() bool {
		w.poll()
		return proc.State(pid) == 'S'
	})
	if out.Len() > 0 {
		t.Errorf("the warden said %q, want nothing", out.String())
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not come in 5s", what)
		}
	}
}
