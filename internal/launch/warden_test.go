package launch

import (
	"bytes"
	"os"
	"strings"
	"testing"

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
