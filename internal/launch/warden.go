package launch

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/proc"
)

// The warden holds the traced processes still while uprobes are
// attached, without anyone else seeing it.
//
// The BPF side pauses a process that maps a new executable file (or
// runs its first graph, with op probes) by sending it SIGSTOP. For a
// process nobody ptraces, that is a group stop, and its parent hears of
// it (SIGCHLD with CLD_STOPPED, a wait with WUNTRACED): `perf trace --`
// took it for the end of its workload and quit. The warden ptraces
// (PTRACE_SEIZE) every traced process instead, from its first
// instruction on, and follows its children (PTRACE_O_TRACEFORK, VFORK).
// Threads it seizes a little after they start (`threads`), not at their
// clone: a clone under PTRACE_O_TRACECLONE stops the parent and the new
// thread until the tracer runs, and llama.cpp without a thread pool
// attached (node-llama-cpp, any program on llama.h that attaches none)
// starts its compute threads for every graph: on two busy CPUs that
// cost 20% of the tokens a second. A thread not seized yet is not
// stopped (bpf's proc__stop counts it). A SIGSTOP sent to a ptraced
// thread first stops it in a signal-delivery stop, which only its
// tracer sees; the warden keeps it there until the recorder says the
// probes are on, then resumes it with the signal suppressed. The
// parent, the siblings and the process itself never see a stop. Every
// other signal is passed on as it came, and real group stops stay group
// stops (PTRACE_LISTEN).
//
// The warden is a process of its own, not a thread of the recorder: a
// ptraced child of its own tracer's thread group has its ptrace stops
// reported to the parent's plain waits as well (the kernel's
// wait_consider_task), so the recorder's wait for the command would see
// them. As a separate process the recorder stays the command's real
// parent with nothing changed.
//
// It speaks lines over its standard input and output:
//
//	seize PID          → ok PID | err PID MESSAGE
//	threads TGID       (seize the threads TGID started, rescanDelay later)
//	freeze TGID        → ok TGID | err TGID MESSAGE (every thread stopped)
//	thaw TGID          (resume what freeze stopped)
//	release TGID       (resume one held stop of the process; if none is
//	                    held yet, the next one is resumed at once)
//	detach             → detached HELD MAX_HOLD_NS  (then it exits)
//	                   ← warn MESSAGE, at any time
const wardenEnv = "IOCORR_PTRACE_WARDEN"

// siginfo is the start of the kernel's siginfo_t as waitid and
// PTRACE_GETSIGINFO fill it (x86-64 and arm64 alike): the SIGCHLD and
// kill fields.
type siginfo struct {
	Signo  int32
	Errno  int32
	Code   int32
	_      int32
	Pid    int32
	UID    uint32
	Status int32
	_      [100]byte
}

// Codes of siginfo: SIGCHLD's causes, and a signal the kernel sent itself
// (bpf_send_signal sends with SI_KERNEL).
const (
	cldExited  = 1
	cldKilled  = 2
	cldDumped  = 3
	cldTrapped = 4
	siKernel   = 0x80
)

const ptraceOptions = unix.PTRACE_O_TRACEFORK | unix.PTRACE_O_TRACEVFORK | unix.PTRACE_O_TRACEEXEC

// rescanDelay is how long after a thread starts the warden looks for it:
// the compute threads llama.cpp starts for one graph are gone by then
// (a token in RAM is milliseconds), so seizing is paid by the threads that
// last, not by every token.
const rescanDelay = 100 * time.Millisecond

// maxHold is how long a pause waits for the recorder's release before
// the warden lets the process go by itself: the event that asked for the
// attach may have been lost (a full ring buffer).
const maxHold = 10 * time.Second

type tracee struct {
	tgid int
}

type held struct {
	tid int
	at  time.Time
	// group: the pause began before the seize, as a group stop (the
	// launcher itself is paused while the loader maps its libraries, and
	// only the recorder, its parent, could see that).
	group bool
}

type warden struct {
	out     *bufio.Writer
	tracees map[int]tracee // by tid
	procs   map[int]int    // tgid → threads traced
	held    map[int][]held // tgid → threads held in our SIGSTOP
	credits map[int]int    // tgid → releases that came before their stop
	leaving map[int]bool   // tgid → stopped for real: being detached
	// pre: tid → seized, and no stop of it reported since. A group stop
	// is its first report only if it began before the seize: one that
	// begins later passes the warden first (the SIGSTOP's
	// signal-delivery stop). So it is the pause the kernel side asked for
	// before the warden held the process (the launcher's, as the loader
	// maps its libraries), even where the thread was still running when
	// it was listed: reading its state there and calling that "someone
	// else's stop" let the whole process go on a loaded machine.
	pre      map[int]bool
	freezing map[int]bool      // tgid → being frozen (freeze), until thawed
	frozen   map[int]bool      // tid → in the interrupt stop of a freeze
	rescan   map[int]time.Time // tgid → when to seize the threads it started
	// rescanFailed: tgid → a seize of its new threads failed, and was said.
	rescanFailed map[int]bool
	nHeld        int
	maxHold      time.Duration
	detached     bool
	// beforeSeize, a test's, runs between a thread's listing and its
	// seize: where a stop can begin unseen.
	beforeSeize func(tid int)
}

func newWarden(out io.Writer) *warden {
	return &warden{out: bufio.NewWriter(out), tracees: map[int]tracee{}, procs: map[int]int{},
		held: map[int][]held{}, credits: map[int]int{}, leaving: map[int]bool{}, pre: map[int]bool{},
		freezing: map[int]bool{}, frozen: map[int]bool{}, rescan: map[int]time.Time{}, rescanFailed: map[int]bool{}}
}

func (w *warden) say(format string, a ...any) {
	fmt.Fprintf(w.out, format+"\n", a...)
	w.out.Flush()
}

func ptraceRaw(req, pid int, addr, data uintptr) error {
	_, _, e := unix.Syscall6(unix.SYS_PTRACE, uintptr(req), uintptr(pid), addr, data, 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

func (w *warden) add(tid, tgid int) {
	if _, ok := w.tracees[tid]; ok {
		return
	}
	w.tracees[tid] = tracee{tgid: tgid}
	w.procs[tgid]++
}

func (w *warden) drop(tid int) {
	t, ok := w.tracees[tid]
	if !ok {
		return
	}
	delete(w.tracees, tid)
	delete(w.pre, tid)
	delete(w.frozen, tid)
	if w.procs[t.tgid]--; w.procs[t.tgid] <= 0 {
		delete(w.procs, t.tgid)
		delete(w.credits, t.tgid)
		delete(w.leaving, t.tgid)
	}
	hs := w.held[t.tgid]
	for i, h := range hs {
		if h.tid == tid {
			w.held[t.tgid] = append(hs[:i], hs[i+1:]...)
			break
		}
	}
}

// threadEnded says whether a thread has exited: gone, or a zombie (dead,
// still listed until its process reaps it), which the kernel refuses to
// trace with EPERM, not ESRCH.
func threadEnded(tid int) bool {
	st := proc.State(tid)
	return st == 0 || st == 'Z' || st == 'X'
}

// tracedByMe says whether this thread traces thread tid already: a child
// process of a seized thread is traced from its start (PTRACE_O_TRACEFORK),
// and a listing can see it before its first stop is reported; a second
// seize of it fails with EPERM.
func tracedByMe(tid int) bool {
	v, _ := proc.StatusField(strconv.Itoa(tid), "TracerPid")
	pid, err := strconv.Atoi(v)
	return err == nil && pid == unix.Gettid()
}

// seize traces every thread of pid, until a listing finds no new one (a
// thread may start while the others are seized; the next listing sees it).
func (w *warden) seize(pid int) error {
	for {
		ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return err
		}
		fresh := 0
		for _, e := range ents {
			tid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			if _, ok := w.tracees[tid]; ok {
				continue
			}
			if w.beforeSeize != nil {
				w.beforeSeize(tid)
			}
			if err := ptraceRaw(unix.PTRACE_SEIZE, tid, 0, ptraceOptions); err != nil {
				if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EPERM) && threadEnded(tid) {
					continue // the thread ended meanwhile
				}
				if errors.Is(err, unix.EPERM) && tracedByMe(tid) {
					continue // a child: its first stop registers it
				}
				return fmt.Errorf("ptrace seize of thread %d: %w", tid, err)
			}
			w.add(tid, pid)
			w.pre[tid] = true
			fresh++
		}
		if fresh == 0 {
			return nil
		}
	}
}

func (w *warden) cont(tid, sig int) {
	if err := ptraceRaw(unix.PTRACE_CONT, tid, 0, uintptr(sig)); err != nil && !errors.Is(err, unix.ESRCH) {
		w.say("warn thread %d could not be resumed: %v", tid, err)
	}
}

func (w *warden) detachOne(tid, sig int) {
	if err := ptraceRaw(unix.PTRACE_DETACH, tid, 0, uintptr(sig)); err != nil && !errors.Is(err, unix.ESRCH) {
		w.say("warn thread %d could not be detached: %v", tid, err)
	}
	w.drop(tid)
}

// resume ends a pause of ours: the SIGSTOP is suppressed.
func (w *warden) resume(tgid int, h held) {
	if d := time.Since(h.at); d > w.maxHold {
		w.maxHold = d
	}
	if h.group {
		// The group stop ends as a stop ends for everyone: SIGCONT
		// (to a tracee it is one more signal, passed on at its delivery).
		unix.Kill(tgid, unix.SIGCONT)
	}
	if w.detached {
		w.detachOne(h.tid, 0)
		return
	}
	w.cont(h.tid, 0)
}

// release is the recorder's word that the probes a pause of tgid waited
// for are on. A process the warden does not trace was stopped for real
// (it could not be seized): SIGCONT, as before the warden.
func (w *warden) release(tgid int) {
	if w.procs[tgid] == 0 {
		if err := unix.Kill(tgid, unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
			w.say("warn process %d, stopped for a uprobe attach, could not be continued: %v; `kill -CONT %d` releases it", tgid, err, tgid)
		}
		return
	}
	if hs := w.held[tgid]; len(hs) > 0 {
		w.held[tgid] = hs[1:]
		w.resume(tgid, hs[0])
		return
	}
	w.credits[tgid]++
}

// stopped handles one ptrace stop of tid; status is the kernel's exit
// code of the stop: the signal, and the ptrace event above it.
func (w *warden) stopped(tid int, status int32) {
	sig, ev := int(status&0xff), int(status>>8)&0xff
	pre := w.pre[tid]
	delete(w.pre, tid)
	switch ev {
	case unix.PTRACE_EVENT_FORK, unix.PTRACE_EVENT_VFORK:
		// The new process is traced already and waits in its first
		// stop; known from now on, it is resumed when that stop is seen.
		// (Threads are not followed at their clone: see threads.)
		if msg, err := unix.PtraceGetEventMsg(tid); err == nil {
			w.add(int(msg), int(msg))
		}
	case unix.PTRACE_EVENT_EXEC:
		// A thread other than the leader that execs takes the leader's
		// id; its own id is gone.
		if msg, err := unix.PtraceGetEventMsg(tid); err == nil && int(msg) != tid {
			w.drop(int(msg))
		}
	case unix.PTRACE_EVENT_STOP:
		switch syscall.Signal(sig) {
		case unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU:
			if pre {
				w.hold(tid, true)
				return
			}
			// A real group stop (someone else's SIGSTOP, a terminal's
			// Ctrl-Z): under ptrace the process would sit in ptrace stops
			// its parent cannot see, so the warden lets the whole
			// process go, and it stops as if nobody traced it.
			w.leave(w.tracees[tid].tgid)
			w.detachOne(tid, 0)
			return
		}
	case 0:
		// A signal about to be delivered.
		var si siginfo
		ptraceRaw(unix.PTRACE_GETSIGINFO, tid, 0, uintptr(unsafe.Pointer(&si)))
		if syscall.Signal(sig) == unix.SIGSTOP && si.Code == siKernel && si.Pid == 0 {
			w.hold(tid, false)
			return
		}
		if w.detached || w.leaving[w.tracees[tid].tgid] {
			w.detachOne(tid, sig)
		} else {
			w.cont(tid, sig)
		}
		return
	}
	if w.detached || w.leaving[w.tracees[tid].tgid] {
		w.detachOne(tid, 0)
		return
	}
	if ev == unix.PTRACE_EVENT_STOP && w.freezing[w.tracees[tid].tgid] {
		w.frozen[tid] = true
		return
	}
	w.cont(tid, 0)
}

// freeze stops every thread of tgid in an interrupt stop, invisible as
// the pauses are, and waits until each is stopped (or held in a pause):
// no fault and no call happens in the process until thaw.
func (w *warden) freeze(tgid int) error {
	w.freezing[tgid] = true
	interrupted := map[int]bool{}
	interrupt := func() error {
		// Threads started since the last seize are not traced yet.
		if err := w.seize(tgid); err != nil {
			return err
		}
		for tid, t := range w.tracees {
			if t.tgid == tgid && !interrupted[tid] {
				interrupted[tid] = true
				unix.PtraceInterrupt(tid)
			}
		}
		return nil
	}
	if err := interrupt(); err != nil {
		return err
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		w.poll()
		still := 0
		for tid, t := range w.tracees {
			if t.tgid == tgid && !w.frozen[tid] && !w.isHeld(tgid, tid) {
				still++
			}
		}
		if still == 0 {
			// Once every thread is stopped none starts another: a last
			// listing finds any started before the stops.
			n := len(interrupted)
			if err := interrupt(); err != nil {
				return err
			}
			if len(interrupted) == n {
				return nil
			}
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d threads of process %d did not stop in 5s", still, tgid)
		}
		time.Sleep(time.Millisecond)
	}
}

func (w *warden) isHeld(tgid, tid int) bool {
	for _, h := range w.held[tgid] {
		if h.tid == tid {
			return true
		}
	}
	return false
}

// thaw resumes what freeze stopped.
func (w *warden) thaw(tgid int) {
	delete(w.freezing, tgid)
	for tid := range w.frozen {
		if w.tracees[tid].tgid == tgid {
			delete(w.frozen, tid)
			w.cont(tid, 0)
		}
	}
}

// leave detaches every thread of a process that was stopped for real:
// each is interrupted, and detached at its next stop. Later pauses of it
// are SIGSTOPs its parent can see (release continues it with SIGCONT).
func (w *warden) leave(tgid int) {
	if w.leaving[tgid] {
		return
	}
	w.leaving[tgid] = true
	w.say("warn process %d was stopped by a signal from elsewhere: it is no longer held invisibly, so that its parent sees the stop; its later pauses for uprobe attaches are SIGSTOPs", tgid)
	// A thread held in a group stop taken for ours (seized while it
	// stopped) is in this stop: detached, it stays stopped with the rest.
	var stopped []int
	var hs []held
	for _, h := range w.held[tgid] {
		if h.group {
			stopped = append(stopped, h.tid)
		} else {
			hs = append(hs, h)
		}
	}
	w.held[tgid] = hs
	for _, tid := range stopped {
		w.detachOne(tid, 0)
	}
	for tid, t := range w.tracees {
		if t.tgid == tgid {
			unix.PtraceInterrupt(tid)
		}
	}
}

// hold keeps tid in a pause of ours until the recorder releases it (or
// resumes it at once when the release came first).
func (w *warden) hold(tid int, group bool) {
	tg := w.tracees[tid].tgid
	h := held{tid: tid, at: time.Now(), group: group}
	w.nHeld++
	if w.credits[tg] > 0 {
		w.credits[tg]--
		w.resume(tg, h)
		return
	}
	w.held[tg] = append(w.held[tg], h)
}

// poll takes every report waiting from the tracees, without blocking.
func (w *warden) poll() {
	// A task met in this pass (the child of a fork or clone stop seen
	// here) is waited for in the same poll: its first stop may have been
	// signalled already, with the SIGCHLD that woke this poll, and would
	// otherwise wait for the next one or the tick (up to 100 ms per new
	// thread, measured: 45 ms a thread).
	seen := make(map[int]bool, len(w.tracees))
	for {
		var tids []int
		for tid := range w.tracees {
			if !seen[tid] {
				tids = append(tids, tid)
			}
		}
		if len(tids) == 0 {
			return
		}
		for _, tid := range tids {
			seen[tid] = true
			w.pollOne(tid)
		}
	}
}

// pollOne takes the report waiting from tid, if any, without blocking.
func (w *warden) pollOne(tid int) {
	if _, ok := w.tracees[tid]; !ok {
		return
	}
	// The tracer reaps a tracee's exit first; only then does its
	// real parent hear of it.
	var si siginfo
	err := unix.Waitid(unix.P_PID, tid, (*unix.Siginfo)(unsafe.Pointer(&si)), unix.WSTOPPED|unix.WEXITED|unix.WNOHANG|unix.WALL, nil)
	if errors.Is(err, unix.ECHILD) {
		w.drop(tid)
		return
	}
	if err != nil || si.Pid == 0 {
		return
	}
	switch si.Code {
	case cldExited, cldKilled, cldDumped:
		w.drop(tid)
	case cldTrapped:
		w.stopped(tid, si.Status)
	}
}

// rescanDue seizes the threads of processes whose threads started at
// least rescanDelay ago (threads): those still running by then.
func (w *warden) rescanDue() {
	for tg, at := range w.rescan {
		if time.Now().Before(at) {
			continue
		}
		delete(w.rescan, tg)
		if w.procs[tg] == 0 {
			continue // gone, or never ours
		}
		if err := w.seize(tg); err != nil && !errors.Is(err, fs.ErrNotExist) && !w.rescanFailed[tg] {
			// Once a process: a thread traced by someone else stays so.
			w.rescanFailed[tg] = true
			w.say("warn the threads process %d started could not be seized: %v; a pause they need is skipped, and counted", tg, err)
		}
	}
}

// expire lets go of pauses the recorder never released.
func (w *warden) expire() {
	for tg, hs := range w.held {
		for len(hs) > 0 && time.Since(hs[0].at) >= maxHold {
			w.say("warn process %d was held %s for a uprobe attach the recorder never confirmed (its event was lost?); it was let go", tg, maxHold)
			w.resume(tg, hs[0])
			hs = hs[1:]
		}
		w.held[tg] = hs
	}
}

// nextDue is the earliest moment the loop has work of its own: a held
// pause to expire or a process's new threads to seize; false if none.
func (w *warden) nextDue() (time.Time, bool) {
	var due time.Time
	earliest := func(t time.Time) {
		if due.IsZero() || t.Before(due) {
			due = t
		}
	}
	for _, hs := range w.held {
		if len(hs) > 0 {
			earliest(hs[0].at.Add(maxHold))
		}
	}
	for _, at := range w.rescan {
		earliest(at)
	}
	return due, !due.IsZero()
}

// detachAll lets every tracee go: each is interrupted into a ptrace stop
// (the only state it can be detached in) and detached from it, with a
// signal it was about to receive passed on.
func (w *warden) detachAll() {
	w.detached = true
	for tg, hs := range w.held {
		for _, h := range hs {
			w.resume(tg, h)
		}
		delete(w.held, tg)
	}
	for tid := range w.tracees {
		if err := unix.PtraceInterrupt(tid); errors.Is(err, unix.ESRCH) {
			w.drop(tid)
		}
	}
	deadline := time.Now().Add(3 * time.Second)
	for len(w.tracees) > 0 && time.Now().Before(deadline) {
		w.poll()
		if len(w.tracees) > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	if n := len(w.tracees); n > 0 {
		w.say("warn %d threads did not stop to be detached in 3s; they are let go when the warden exits", n)
	}
}

// runWarden is the warden process's main loop; it never returns.
func runWarden() {
	// Every ptrace request must come from the thread that seized.
	runtime.LockOSThread()
	w := newWarden(os.Stdout)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGCHLD)
	// The recorder's terminal signals are for the command and the
	// recorder: the warden goes only when told, or when its input ends.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	cmds := make(chan string)
	go func() {
		sc := bufio.NewScanner(commandsIn())
		for sc.Scan() {
			cmds <- sc.Text()
		}
		close(cmds)
	}()
	// A stop reported between a poll and the next SIGCHLD is still seen:
	// the signal stays pending until then. The timer only wakes the
	// warden when a pause expires or new threads are due to be seized,
	// at that moment: every wake of this process took CPU from the traced
	// command, and a tick every 50 ms while threads came and went woke
	// it ~100 times a second.
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if due, ok := w.nextDue(); ok {
			timer.Reset(max(time.Until(due), 0))
		} else {
			timer.Stop()
		}
		select {
		case c, ok := <-cmds:
			if !ok {
				w.detachAll()
				os.Exit(0)
			}
			f := strings.Fields(c)
			switch {
			case len(f) >= 2 && f[0] == "seize":
				pid, _ := strconv.Atoi(f[1])
				if err := w.seize(pid); err != nil {
					w.say("err %d %v", pid, err)
				} else {
					w.say("ok %d", pid)
				}
			case len(f) == 2 && f[0] == "threads":
				tg, _ := strconv.Atoi(f[1])
				if _, ok := w.rescan[tg]; !ok {
					w.rescan[tg] = time.Now().Add(rescanDelay)
				}
			case len(f) == 2 && f[0] == "freeze":
				tg, _ := strconv.Atoi(f[1])
				if err := w.freeze(tg); err != nil {
					w.say("err %d %v", tg, err)
				} else {
					w.say("ok %d", tg)
				}
			case len(f) == 2 && f[0] == "thaw":
				tg, _ := strconv.Atoi(f[1])
				w.thaw(tg)
			case len(f) == 2 && f[0] == "release":
				tg, _ := strconv.Atoi(f[1])
				w.release(tg)
			case len(f) == 1 && f[0] == "detach":
				w.detachAll()
				w.say("detached %d %d", w.nHeld, w.maxHold.Nanoseconds())
				os.Exit(0)
			}
		case <-sigc:
		case <-timer.C:
		}
		w.poll()
		w.expire()
		w.rescanDue()
	}
}

// commandsIn is the warden's standard input read through Go's poller.
// Read as os.Stdin (a blocking pipe), the reading goroutine sat in
// read(2) between requests, and the runtime's monitor (sysmon), which
// sleeps only while no goroutine is in a system call, took its P back
// every 10 ms and then polled at 20 µs again: ~800 wakes a second of a
// warden with nothing to do, on the CPUs the command runs on. A
// descriptor that cannot be made non-blocking is read as it is.
func commandsIn() io.Reader {
	if err := unix.SetNonblock(0, true); err != nil {
		return os.Stdin
	}
	return os.NewFile(0, "warden commands")
}

// Warden is the recorder's handle on the warden process.
type Warden struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	mu    sync.Mutex // serializes writes to in
	reply chan string
	done  chan string
	warn  func(string)

	closeOnce sync.Once
	stats     WardenStats
	closeErr  error

	// asked: tgid → when the warden was last asked to seize its new
	// threads (SeizeThreads), under askedMu.
	askedMu sync.Mutex
	asked   map[int]time.Time
}

// WardenStats says what the warden held: pauses, and the longest.
type WardenStats struct {
	Held    int
	MaxHold time.Duration
}

// StartWarden starts the warden process; warn receives what it says went
// wrong while it runs.
func StartWarden(warn func(string)) (*Warden, error) {
	// It must not outlive the recorder; its tracees are detached by the
	// kernel when it goes.
	cmd, in, out, err := StartHelper(wardenEnv, "the ptrace warden", &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}, nil)
	if err != nil {
		return nil, err
	}
	w := &Warden{cmd: cmd, in: in, reply: make(chan string, 1), done: make(chan string, 1), warn: warn}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := sc.Text()
			switch {
			case strings.HasPrefix(l, "warn "):
				w.warn(strings.TrimPrefix(l, "warn "))
			case strings.HasPrefix(l, "detached "):
				w.done <- l
			default:
				w.reply <- l
			}
		}
		close(w.done)
	}()
	return w, nil
}

func (w *Warden) send(line string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, err := io.WriteString(w.in, line+"\n")
	return err
}

// Seize traces pid's threads and every process it starts from now on.
func (w *Warden) Seize(pid int) error { return w.ask("seize", pid) }

// SeizeThreads has the warden seize the threads process tgid started,
// rescanDelay from now (those still running then); no answer is awaited.
//
// A request within rescanDelay of the last one for the same process is
// not sent: the rescan that one set is still to come, no sooner than
// rescanDelay after it was sent, and seizes every thread alive then,
// this one's too. Sent every time, it woke the warden for every token of
// a program that starts threads per graph (~17 context switches a
// request, 3,400 a second at 200 requests a second), on the CPUs the
// command runs on.
func (w *Warden) SeizeThreads(tgid int) error {
	now := time.Now()
	w.askedMu.Lock()
	if at, ok := w.asked[tgid]; ok && now.Sub(at) < rescanDelay {
		w.askedMu.Unlock()
		return nil
	}
	if w.asked == nil {
		w.asked = map[int]time.Time{}
	}
	w.asked[tgid] = now
	w.askedMu.Unlock()
	return w.send(fmt.Sprintf("threads %d", tgid))
}

// Freeze stops every thread of a seized process, unseen by its family,
// until Thaw: what is read of it meanwhile (its fault counters) is read
// of a process that does nothing.
func (w *Warden) Freeze(pid int) error { return w.ask("freeze", pid) }

// Thaw resumes a process Freeze stopped.
func (w *Warden) Thaw(pid int) error { return w.send(fmt.Sprintf("thaw %d", pid)) }

func (w *Warden) ask(verb string, pid int) error {
	if err := w.send(fmt.Sprintf("%s %d", verb, pid)); err != nil {
		return fmt.Errorf("ptrace warden: %w", err)
	}
	select {
	case r := <-w.reply:
		if msg, ok := strings.CutPrefix(r, fmt.Sprintf("err %d ", pid)); ok {
			return errors.New(msg)
		}
		return nil
	case <-time.After(10 * time.Second):
		return errors.New("ptrace warden: no answer in 10s")
	}
}

// Release resumes one pause of process tgid (or, for a process the warden
// does not trace, sends it SIGCONT).
func (w *Warden) Release(tgid int) error { return w.send(fmt.Sprintf("release %d", tgid)) }

// Close detaches every tracee, leaving each running (or stopped, if it
// was stopped for real), and ends the warden. Later calls return what the
// first did.
func (w *Warden) Close() (WardenStats, error) {
	w.closeOnce.Do(func() { w.stats, w.closeErr = w.close() })
	return w.stats, w.closeErr
}

func (w *Warden) close() (WardenStats, error) {
	var st WardenStats
	if err := w.send("detach"); err != nil {
		w.cmd.Process.Kill()
		w.cmd.Wait()
		return st, fmt.Errorf("ptrace warden: %w", err)
	}
	l, ok := <-w.done
	w.in.Close()
	err := w.cmd.Wait()
	if !ok {
		return st, fmt.Errorf("ptrace warden ended without detaching: %v", err)
	}
	var ns int64
	fmt.Sscanf(l, "detached %d %d", &st.Held, &ns)
	st.MaxHold = time.Duration(ns)
	return st, nil
}
