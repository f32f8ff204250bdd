package launch

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

func TestHeldChildRunsOnlyWhenReleased(t *testing.T) {
	testenv.RequireRoot(t)
	mark := filepath.Join(t.TempDir(), "ran")
	c, err := StartHeld([]string{"sh", "-c", "echo $$ > " + mark}, nil, os.Stdout, os.Stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("the child ran before it was released")
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	ex := c.Wait()
	if ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	b, err := os.ReadFile(mark)
	if err != nil {
		t.Fatal(err)
	}
	// The command kept the pid the tracer was given.
	if strings.TrimSpace(string(b)) != strconv.Itoa(c.PID()) {
		t.Fatalf("command ran as pid %s, child pid %d", b, c.PID())
	}
}

func TestAbortedChildNeverRunsTheCommand(t *testing.T) {
	testenv.RequireRoot(t)
	mark := filepath.Join(t.TempDir(), "ran")
	c, err := StartHeld([]string{"touch", mark}, nil, os.Stdout, os.Stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Abort()
	if _, err := os.Stat(mark); err == nil {
		t.Fatal("an aborted child ran the command")
	}
}

func TestExitStatusIsTheChildsAsAShellReportsIt(t *testing.T) {
	testenv.RequireRoot(t)
	tests := []struct {
		name   string
		argv   []string
		code   int
		signal string
	}{
		{"success", []string{"true"}, 0, ""},
		{"failure code passes through", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"a crash is 128 plus the signal", []string{"sh", "-c", "kill -SEGV $$"}, 128 + int(syscall.SIGSEGV), "SIGSEGV"},
		{"a command that cannot run is 126", []string{"sh", "-c", "exec /dev/null"}, 126, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := StartHeld(tc.argv, nil, io.Discard, io.Discard, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.Release()
			ex := c.Wait()
			if ex.Code != tc.code || ex.Signal != tc.signal {
				t.Fatalf("exit = %d %q, want %d %q", ex.Code, ex.Signal, tc.code, tc.signal)
			}
		})
	}
}

func TestChildRusageCountsItsFaultsAndIO(t *testing.T) {
	testenv.RequireRoot(t)
	p := testenv.DiskFile(t, make([]byte, 16<<20))
	if _, _, err := pagecache.Evict(p); err != nil {
		t.Fatal(err)
	}
	c, err := StartHeld([]string{"dd", "if=" + p, "of=/dev/null", "bs=1M", "iflag=direct"}, nil, io.Discard, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	ex := c.Wait()
	ru := ex.Rusage
	// 16 MiB read is 32768 sectors of 512 bytes.
	if ex.Code != 0 || ru.Inblock < 32768 || ru.Minflt == 0 || ru.Maxrss == 0 {
		t.Fatalf("exit %d, rusage inblock %d minflt %d maxrss %d", ex.Code, ru.Inblock, ru.Minflt, ru.Maxrss)
	}
}

func TestStartHeldRejectsAMissingCommand(t *testing.T) {
	if _, err := StartHeld([]string{"no-such-command-iocorr"}, nil, os.Stdout, os.Stderr, nil); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("err = %v", err)
	}
}

func TestChildRunsAsTheGivenUserWithTheirGroupsAndHome(t *testing.T) {
	testenv.RequireRoot(t)
	u, err := proc.LookupUser("nobody")
	if err != nil {
		t.Fatalf("no user nobody on this machine: %v", err)
	}
	dir, err := os.MkdirTemp("", "iocorr-user")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777) // writable by nobody
	out := filepath.Join(dir, "id")
	c, err := StartHeld([]string{"sh", "-c", `echo "$(id -u) $(id -g) $(id -G) $HOME $USER" > ` + out}, u, os.Stdout, os.Stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.Release()
	if ex := c.Wait(); ex.Code != 0 {
		t.Fatalf("exit %+v", ex)
	}
	b, _ := os.ReadFile(out)
	want := fmt.Sprintf("%d %d %d", u.UID, u.GID, u.GID)
	for _, g := range u.Groups {
		want += fmt.Sprintf(" %d", g)
	}
	want += " " + u.Home + " nobody"
	if strings.TrimSpace(string(b)) != want {
		t.Fatalf("ran as %q, want %q", strings.TrimSpace(string(b)), want)
	}
	// The file it wrote is its own.
	var st unix.Stat_t
	unix.Stat(out, &st)
	if st.Uid != u.UID {
		t.Fatalf("file written by the command belongs to uid %d", st.Uid)
	}
}

const ttyHelperEnv = "IOCORR_TEST_TTY_HELPER"

// ttyHelper runs `sleep 30` held and released as record does, forwarding
// signals, and reports "received forwarded exit-code" on stdout.
func ttyHelper() int {
	c, err := StartHeld([]string{"sleep", "30"}, nil, io.Discard, os.Stderr, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	stop := c.ForwardSignals()
	c.Release()
	fmt.Println("ready")
	c.WaitTimeout(10 * time.Second)
	c.Signal(syscall.SIGKILL) // not interrupted: the check fails below
	n := stop()
	fmt.Println(n.Received, n.Forwarded, c.Wait().Code)
	return 0
}

// orphanHelper starts `sleep 30` (as nobody when IOCORR_TEST_USER is
// set), prints its pid and waits to be killed.
func orphanHelper() int {
	var u *proc.User
	if os.Getenv("IOCORR_TEST_USER") != "" {
		var err error
		if u, err = proc.LookupUser(os.Getenv("IOCORR_TEST_USER")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	c, err := StartHeld([]string{"sleep", "30"}, u, io.Discard, os.Stderr, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	c.Release()
	for i := 0; i < 500; i++ { // until the shim has exec'd the command
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", c.PID())); strings.TrimSpace(string(b)) == "sleep" {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Println(c.PID())
	time.Sleep(30 * time.Second)
	return 0
}

func TestCommandDoesNotOutliveAKilledIocorr(t *testing.T) {
	testenv.RequireRoot(t)
	for _, user := range []string{"", "nobody"} {
		t.Run("user "+user, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), ttyHelperEnv+"=orphan", "IOCORR_TEST_USER="+user)
			cmd.Stderr = os.Stderr
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pid int
			if _, err := fmt.Fscan(out, &pid); err != nil {
				cmd.Process.Kill()
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.TrimSpace(string(b)) != "sleep" {
				t.Fatalf("child %d is %q, not sleep", pid, b)
			}
			cmd.Process.Kill()
			cmd.Wait()
			for i := 0; ; i++ {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
				// Gone, or a zombie waiting for init to reap it.
				if err != nil || strings.Contains(string(b), ") Z ") {
					break
				}
				if i == 100 {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Fatalf("the command (pid %d) outlived the killed iocorr", pid)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

func TestSignalsReachTheChildExactlyOnce(t *testing.T) {
	testenv.RequireRoot(t)
	tests := []struct {
		name          string
		onTerminal    bool // the helper is in the foreground of a terminal
		send          func(master *os.File, helper int)
		wantForwarded int
		wantCode      int
	}{
		{
			name:       "Ctrl-C at the terminal reaches the child from the terminal, not again from iocorr",
			onTerminal: true,
			send:       func(m *os.File, _ int) { m.Write([]byte{3}) },
			wantCode:   128 + int(syscall.SIGINT),
		},
		{
			name:          "SIGTERM to iocorr is forwarded",
			onTerminal:    true,
			send:          func(_ *os.File, pid int) { syscall.Kill(pid, syscall.SIGTERM) },
			wantForwarded: 1,
			wantCode:      128 + int(syscall.SIGTERM),
		},
		{
			name:          "SIGINT to iocorr without a terminal is forwarded",
			send:          func(_ *os.File, pid int) { syscall.Kill(pid, syscall.SIGINT) },
			wantForwarded: 1,
			wantCode:      128 + int(syscall.SIGINT),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			master, slave := testenv.OpenPTY(t)
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), ttyHelperEnv+"=1")
			cmd.Stderr = os.Stderr
			// A session of its own, as a login shell's job; with the
			// terminal as its controlling one when asked.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if tc.onTerminal {
				cmd.Stdin = slave
				cmd.SysProcAttr.Setctty = true
				cmd.SysProcAttr.Ctty = 0
			}
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Process.Kill()
			sc := bufio.NewScanner(out)
			if !sc.Scan() || sc.Text() != "ready" {
				t.Fatalf("helper said %q", sc.Text())
			}
			time.Sleep(100 * time.Millisecond) // sleep has exec'd
			tc.send(master, cmd.Process.Pid)
			if !sc.Scan() {
				t.Fatal("no report from the helper")
			}
			var recv, fwd, code int
			fmt.Sscan(sc.Text(), &recv, &fwd, &code)
			cmd.Wait()
			if recv != 1 || fwd != tc.wantForwarded || code != tc.wantCode {
				t.Fatalf("received %d, forwarded %d, child exit %d; want 1, %d, %d", recv, fwd, code, tc.wantForwarded, tc.wantCode)
			}
		})
	}
}

// The held child is iocorr re-executed as the launcher: its exec of
// iocorr zeroes the partial .bss page (a write fault on a page of the
// file), and the Go runtime then starts, all before the command runs and
// before the pid that the fork returned could be handed to the tracer.
// With iocorr's own pages evicted those faults are major, and the
// kernel's rusage counts them. Traced from the fork, the child's recorded
// major faults are exactly its rusage's: the same set, counted by the
// same accounting (mm_account_fault), since `true` makes no fault on
// behalf of get_user_pages (MAP_POPULATE, mlock), which rusage counts
// and no perf event sees.
func TestChildTracedFromTheForkRecordsEveryMajorFaultItsRusageCounts(t *testing.T) {
	testenv.RequireBPF(t)
	testenv.RequireRoot(t)
	tr, err := bpf.Open(bpf.Options{RingBufBytes: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pagecache.Evict(self); err != nil {
		t.Fatal(err)
	}
	c, err := StartHeld([]string{"true"}, nil, io.Discard, os.Stderr, tr)
	if err != nil {
		t.Fatal(err)
	}
	// The tracer stops a traced process at each new executable mapping
	// until user space attached its probes: go on at once here.
	var major int64
	read := make(chan struct{})
	go func() {
		defer close(read)
		var st ingest.DecodeStats
		var rec ringbuf.Record
		rd := tr.RingBuf()
		for quiet := false; ; {
			rd.SetDeadline(time.Now().Add(200 * time.Millisecond))
			if err := rd.ReadInto(&rec); err != nil {
				select {
				case <-c.Done():
					if quiet {
						return
					}
					quiet = true
				default:
				}
				continue
			}
			r, ok := ingest.Decode(rec.RawSample, &st)
			if !ok || int(r.Hdr.Tgid) != c.PID() {
				continue
			}
			if m := r.Mmap(); m != nil && m.Stopped != 0 {
				unix.Kill(c.PID(), unix.SIGCONT)
			}
			if f := r.Fault(); f != nil && f.Class == uint8(wire.FaultClassFAULT_MAJOR) {
				major++
			}
		}
	}()
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	ex := c.Wait()
	<-read
	if ex.Code != 0 {
		t.Fatalf("true: %+v", ex)
	}
	if lost, err := tr.Lost(); err != nil || lost["fault"] != 0 {
		t.Fatalf("lost fault events: %v %v", lost, err)
	}
	// Without a major fault before the release this test would not tell
	// tracing from the fork from tracing by pid afterwards.
	if ex.Rusage.Majflt == 0 {
		t.Fatal("the child took no major fault although iocorr's pages were evicted")
	}
	if major != ex.Rusage.Majflt {
		t.Errorf("recorded %d major faults of the child, its rusage says %d", major, ex.Rusage.Majflt)
	}
}
