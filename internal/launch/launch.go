// Package launch starts the traced command held: the child exists, with
// its pid, but runs none of the command's code until the tracer releases
// it, so that tracing is in place before its first instruction. It also
// relays the terminating signals iocorr receives while the command runs.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/proc"
)

// shimEnv marks the re-executed iocorr that becomes the traced command;
// shimUserEnv carries "uid:gid:g1,g2" for the user it runs as.
const (
	shimEnv     = "IOCORR_EXEC_SHIM"
	shimUserEnv = "IOCORR_EXEC_USER"
)

func dropTo(spec string) error {
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 {
		return fmt.Errorf("bad user spec %q", spec)
	}
	uid, err1 := strconv.Atoi(parts[0])
	gid, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return fmt.Errorf("bad user spec %q", spec)
	}
	groups := []int{gid}
	for _, g := range strings.Split(parts[2], ",") {
		if v, err := strconv.Atoi(g); err == nil {
			groups = append(groups, v)
		}
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(gid); err != nil {
		return fmt.Errorf("setgid: %w", err)
	}
	if err := syscall.Setuid(uid); err != nil {
		return fmt.Errorf("setuid: %w", err)
	}
	return nil
}

// armDeathSignal asks for SIGKILL when iocorr dies, on the calling thread,
// which must be the one that execs: the parent-death signal is a thread's,
// not a process's. The one StartHeld asked for is on the shim's first
// thread only (the Go runtime's later threads start without it), a change
// of credentials clears it, and execve from another thread ends the first
// one; then a killed iocorr left the command running (perhaps stopped for
// a uprobe attach, forever). ppid is iocorr's pid: if it died before the
// signal was armed, nobody would send it, so the shim quits.
func armDeathSignal(ppid int) error {
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("setting the parent-death signal: %w", err)
	}
	if os.Getppid() != ppid {
		return errors.New("iocorr ended before the command started")
	}
	return nil
}

// RunShimIfChild must be called first in main. In the held child it waits
// until the tracer releases it, then execve()s the command in place (the
// pid stays the same, so the tracer already follows it). It never returns
// in the child.
//
// It also makes the process the ptrace warden (warden.go) when the
// recorder started it as one.
func RunShimIfChild() {
	if IsHelper(wardenEnv) {
		runWarden()
	}
	if !IsHelper(shimEnv) {
		return
	}
	os.Unsetenv(shimEnv)
	// One thread from here to the exec, so that the parent-death signal
	// armed below is on the thread that execs (armDeathSignal).
	runtime.LockOSThread()
	ppid := os.Getppid()
	gate := os.NewFile(3, "gate")
	var b [1]byte
	if n, _ := gate.Read(b[:]); n != 1 || b[0] != 'g' {
		// The tracer went away without releasing us: do not run untraced.
		os.Exit(127)
	}
	gate.Close()
	// Privileges are dropped here rather than by exec.Cmd, so that the
	// iocorr binary itself need not be executable by the target user.
	if u := os.Getenv(shimUserEnv); u != "" {
		os.Unsetenv(shimUserEnv)
		if err := dropTo(u); err != nil {
			fmt.Fprintf(os.Stderr, "iocorr: switching user: %v\n", err)
			os.Exit(126)
		}
	}
	args := os.Args[1:]
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "iocorr: %v\n", err)
		os.Exit(127)
	}
	if err := armDeathSignal(ppid); err != nil {
		fmt.Fprintf(os.Stderr, "iocorr: %v\n", err)
		os.Exit(127)
	}
	err = syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "iocorr: exec %s: %v\n", path, err)
	os.Exit(126)
}

// notAShim refuses to start a shim or a warden from a process that was
// itself started as one but ran its program instead: a binary whose main
// (a test binary's TestMain) does not call RunShimIfChild first. Each of
// its shims and wardens would run the program again, which would start
// its own: a chain of recorders, each holding tracepoints, until the
// kernel refuses more programs on one (seen: 64 nested test binaries).
func notAShim() error {
	if IsHelper(wardenEnv) || IsHelper(shimEnv) {
		return errors.New("this process was started as iocorr's launcher or ptrace warden but ran its own program: its main must call launch.RunShimIfChild first")
	}
	return nil
}

// Child is a command started held: it exists (and has its pid) but runs
// none of its own code until Release.
type Child struct {
	cmd  *exec.Cmd
	gate *os.File
	done chan struct{}
	err  error
}

// ForkTracer follows the processes a thread forks, from the fork itself
// (bpf.Tracer is one). stop ends it for that thread.
type ForkTracer interface {
	TraceForksOf(tid int) (stop func() error, err error)
}

// StartHeld starts argv held. When user is not nil the child runs as that
// user (so files it creates belong to the person who ran sudo). Its
// standard output and error go to out and errw (os.Stdout and os.Stderr
// are passed through as they are).
//
// When tr is not nil the child is traced from its fork. Tracing it by pid
// once the fork returned would leave out what it did before: its exec of
// iocorr as the launcher and the Go runtime's start, whose faults (major
// ones when iocorr's pages were evicted) the kernel counts in the rusage
// of the command all the same.
func StartHeld(argv []string, user *proc.User, out, errw io.Writer, tr ForkTracer) (*Child, error) {
	if len(argv) == 0 {
		return nil, errors.New("no command to run")
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil, fmt.Errorf("command not found: %w", err)
	}
	cmd, err := HelperCommand(shimEnv, argv...)
	if err != nil {
		return nil, err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, out, errw
	cmd.ExtraFiles = []*os.File{r}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if user != nil {
		gs := make([]string, len(user.Groups))
		for i, g := range user.Groups {
			gs[i] = strconv.FormatUint(uint64(g), 10)
		}
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d:%d:%s", shimUserEnv, user.UID, user.GID, strings.Join(gs, ",")))
		if user.Name != "" {
			cmd.Env = setEnv(cmd.Env, "USER", user.Name)
			cmd.Env = setEnv(cmd.Env, "LOGNAME", user.Name)
		}
		if user.Home != "" {
			cmd.Env = setEnv(cmd.Env, "HOME", user.Home)
		}
	}
	if err := startTraced(cmd, tr); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	r.Close()
	c := &Child{cmd: cmd, gate: w, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

// startTraced starts cmd with tr following the forks of this thread: the
// goroutine stays on it from arming to disarming, so that the fork in
// cmd.Start is the only one made there meanwhile.
func startTraced(cmd *exec.Cmd, tr ForkTracer) error {
	if tr == nil {
		return cmd.Start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stop, err := tr.TraceForksOf(unix.Gettid())
	if err != nil {
		return err
	}
	startErr := cmd.Start()
	if err := stop(); err != nil {
		if startErr == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
		return errors.Join(startErr, err)
	}
	return startErr
}

// setEnv replaces (or adds) one variable of an environment list.
func setEnv(env []string, key, val string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return append(out, key+"="+val)
}

// PID is the child's pid, also after it execs the command.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Release lets the child exec the command.
func (c *Child) Release() error {
	defer c.gate.Close()
	if _, err := c.gate.Write([]byte{'g'}); err != nil {
		return fmt.Errorf("releasing the child: %w", err)
	}
	return nil
}

// Abort kills a child that was never released.
func (c *Child) Abort() {
	c.gate.Close()
	c.cmd.Process.Kill()
	<-c.done
}

// RunHeld runs argv untraced the way record launches its command: held
// until place (when not nil) has put it where it is to run, such as a
// memory cgroup, then to its end; ctx being done kills it. The error is
// for what kept it from running as asked (it could not start, or be
// placed) and for ctx; how the command itself ended is in the Exit.
func RunHeld(ctx context.Context, argv []string, user *proc.User, out, errw io.Writer, place func(pid int) error) (Exit, error) {
	child, err := StartHeld(argv, user, out, errw, nil)
	if err != nil {
		return Exit{}, err
	}
	if place != nil {
		if err := place(child.PID()); err != nil {
			child.Abort()
			return Exit{}, err
		}
	}
	if err := child.Release(); err != nil {
		child.Abort()
		return Exit{}, err
	}
	select {
	case <-child.Done():
		return child.Wait(), nil
	case <-ctx.Done():
		child.Abort()
		return child.Wait(), ctx.Err()
	}
}

// Done is closed when the child has exited.
func (c *Child) Done() <-chan struct{} { return c.done }

// Signal forwards a signal to the child.
func (c *Child) Signal(sig os.Signal) error { return c.cmd.Process.Signal(sig) }

// Exit describes how the child ended, once Done is closed.
type Exit struct {
	Code   int    // as a shell reports it: 128+signal when killed
	Signal string // the signal that killed it, if any
	Rusage syscall.Rusage
}

// Wait waits for the child and reports its exit.
func (c *Child) Wait() Exit {
	<-c.done
	var e Exit
	st := c.cmd.ProcessState
	if st == nil {
		e.Code = 127
		return e
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		e.Rusage = *ru
	}
	ws := st.Sys().(syscall.WaitStatus)
	switch {
	case ws.Signaled():
		e.Code = 128 + int(ws.Signal())
		e.Signal = unix.SignalName(ws.Signal())
	default:
		e.Code = ws.ExitStatus()
	}
	return e
}

// Signals says what ForwardSignals saw: how many signals iocorr received
// while the child ran, and how many of them it sent on.
type Signals struct {
	Received, Forwarded int
}

// ForwardSignals relays SIGINT, SIGTERM, SIGHUP and SIGQUIT to the child
// until it exits, so that Ctrl-C stops the command and iocorr finalizes
// the trace instead of dying with it.
//
// The child stays in iocorr's process group, as under a shell, so that
// Ctrl-Z stops both and the terminal delivers Ctrl-C and Ctrl-\ to the
// child itself. Such a signal is not sent a second time: a second SIGINT
// makes llama-cli quit where the first only interrupts generation.
// Whatever the terminal cannot have sent to the child (SIGTERM, a kill
// aimed at iocorr alone, iocorr not in the terminal's foreground) is
// forwarded.
func (c *Child) ForwardSignals() (stop func() Signals) {
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	var n Signals
	quit := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		done, stopping := c.done, quit
		var grace <-chan time.Time
		for {
			select {
			case s := <-ch:
				n.Received++
				if grace != nil || s != syscall.SIGTERM && c.terminalDelivers() {
					continue
				}
				// A child that is already gone got nothing.
				if c.Signal(s) == nil {
					n.Forwarded++
				}
			case <-done:
				done, grace = nil, time.After(signalGrace)
			case <-stopping:
				stopping = nil
				if grace == nil {
					grace = time.After(signalGrace)
				}
			case <-grace:
				return
			}
		}
	}()
	return func() Signals {
		close(quit)
		<-finished
		signal.Stop(ch)
		return n
	}
}

// signalGrace is how long signals are still counted after the child is
// gone. Ctrl-C reaches the command and iocorr at the same moment, but
// iocorr's channel may hear of it only after the command it killed was
// reaped: it was an interruption all the same.
const signalGrace = 20 * time.Millisecond

// terminalDelivers reports whether a keyboard signal iocorr received came
// from its terminal to the whole foreground process group, child
// included: iocorr's group is the terminal's foreground group and the
// child has not left it. A kill aimed at iocorr alone while it is in the
// foreground is then not forwarded (Go does not expose siginfo's sender);
// SIGTERM always is.
func (c *Child) terminalDelivers() bool {
	tty, err := os.Open("/dev/tty")
	if err != nil {
		return false // no controlling terminal
	}
	defer tty.Close()
	fg, err := unix.IoctlGetInt(int(tty.Fd()), unix.TIOCGPGRP)
	if err != nil || fg != unix.Getpgrp() {
		return false
	}
	pg, err := unix.Getpgid(c.PID())
	if err != nil {
		// The terminal's signal may have killed the child already (and
		// it was reaped): it started in iocorr's group.
		pg = unix.Getpgrp()
	}
	return pg == fg
}

// WaitTimeout waits up to d for the child; false if it is still running.
func (c *Child) WaitTimeout(d time.Duration) bool {
	select {
	case <-c.done:
		return true
	case <-time.After(d):
		return false
	}
}

// BecomeSubreaper makes this process the reaper of the orphans of its
// descendants (PR_SET_CHILD_SUBREAPER): a process of the command whose
// parent exits first is reparented to iocorr, not to init, so that its
// exit and its rusage (with those of the children it waited for) come
// back to iocorr, which ReapOrphans collects. restore puts the previous
// setting back.
func BecomeSubreaper() (restore func(), err error) {
	var prev int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&prev)), 0, 0, 0); err != nil {
		return func() {}, fmt.Errorf("reading the child-subreaper setting: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return func() {}, fmt.Errorf("becoming the reaper of the command's orphans: %w", err)
	}
	return func() {
		if prev == 0 {
			unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
		}
	}, nil
}

// Orphans are the command's processes that were reparented to iocorr
// and reaped by it.
type Orphans struct {
	PIDs   []int
	Rusage syscall.Rusage // summed; MaxRSS is the largest
}

// ReapOrphans reaps those of pids that are this process's children:
// orphans of the command reparented to it (BecomeSubreaper). pids are
// processes the command started; one that is not a child of this process
// (its own parent reaped it, or it still has one) is left alone. An
// orphan that has not yet been reported exited (it is still ending, or
// its ptrace exit stop is still with the warden) is waited for up to
// wait; one still running then is left running.
func ReapOrphans(pids []int, wait time.Duration) Orphans {
	var o Orphans
	pending := append([]int(nil), pids...)
	deadline := time.Now().Add(wait)
	for len(pending) > 0 {
		next := pending[:0]
		for _, pid := range pending {
			// Peek first (WNOWAIT): only a child of this process that
			// has exited is reaped.
			var si unix.Siginfo
			err := unix.Waitid(unix.P_PID, pid, &si, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
			if err != nil {
				continue // ECHILD: not an orphan of ours
			}
			if sigPid(&si) == 0 {
				next = append(next, pid) // ours, not exited yet
				continue
			}
			var ws unix.WaitStatus
			var ru unix.Rusage
			if got, err := unix.Wait4(pid, &ws, unix.WNOHANG, &ru); err != nil || got != pid {
				continue
			}
			o.PIDs = append(o.PIDs, pid)
			addRusage(&o.Rusage, (*syscall.Rusage)(unsafe.Pointer(&ru)))
		}
		pending = next
		if len(pending) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return o
}

// sigPid is the pid a waitid filled in; 0 when no child was waiting.
func sigPid(si *unix.Siginfo) int32 {
	return (*siginfo)(unsafe.Pointer(si)).Pid
}

// addRusage adds b's counters to a, as the kernel adds a reaped child's
// to RUSAGE_CHILDREN; the peak RSS is the larger of the two.
func addRusage(a, b *syscall.Rusage) {
	a.Majflt += b.Majflt
	a.Minflt += b.Minflt
	a.Inblock += b.Inblock
	a.Oublock += b.Oublock
	a.Nvcsw += b.Nvcsw
	a.Nivcsw += b.Nivcsw
	a.Utime = syscall.NsecToTimeval(syscall.TimevalToNsec(a.Utime) + syscall.TimevalToNsec(b.Utime))
	a.Stime = syscall.NsecToTimeval(syscall.TimevalToNsec(a.Stime) + syscall.TimevalToNsec(b.Stime))
	a.Maxrss = max(a.Maxrss, b.Maxrss)
}

// AddRusage adds an orphan family's rusage to the command's own.
func (e *Exit) AddRusage(ru *syscall.Rusage) { addRusage(&e.Rusage, ru) }
