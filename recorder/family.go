package recorder

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// family is the traced processes: the command (or the process attached
// to) and every process it starts, alive as far as the events tell, and
// the warden that holds them for uprobe attaches unseen by the family
// itself. It keeps what meta.json says of them (Pauses, Family).
type family struct {
	warn func(string)
	// warden holds traced processes for uprobe attaches unseen by their
	// family (ptrace); nil when it could not start (pauses are then
	// SIGSTOPs, and meta.json says so).
	warden *launch.Warden

	mu sync.Mutex
	// procs are the traced processes still alive: the first one and what
	// it forked.
	procs map[int]bool
	// nprocs counts the processes traced in all; forked are those the
	// command's family started (the orphans iocorr may have to reap).
	nprocs int
	forked []int
	// pauses and record are meta.json's; nil until known.
	pauses *rundir.Pauses
	record *rundir.Family
}

func newFamily(warn func(string)) *family {
	return &family{warn: warn, procs: map[int]bool{}}
}

// first makes pid the family's first process and puts it under the
// warden (hold).
func (f *family) first(pid int) {
	f.mu.Lock()
	f.procs[pid], f.nprocs = true, 1
	f.mu.Unlock()
	f.hold(pid)
}

// hold puts pid (and, from now on, every thread and process it starts)
// under the ptrace warden, so that the pauses for uprobe attaches are
// seen by nobody in its family. The warden starts with the first
// process; when it cannot (ptrace not allowed, the process traced by a
// debugger already) pauses stay SIGSTOPs, which the process's parent can
// see, and the run says so.
func (f *family) hold(pid int) {
	f.mu.Lock()
	starting := f.pauses == nil
	if starting {
		f.pauses = &rundir.Pauses{}
	}
	f.mu.Unlock()
	if starting {
		w, err := launch.StartWarden(f.warn)
		if err != nil {
			f.pausesVisible(err)
			return
		}
		f.warden = w
	}
	if f.warden == nil {
		return
	}
	if err := f.warden.Seize(pid); err != nil {
		f.closeWarden()
		f.warden = nil
		f.mu.Lock()
		f.pauses.Held, f.pauses.MaxHoldNS = 0, 0
		f.mu.Unlock()
		f.pausesVisible(fmt.Errorf("process %d: %w", pid, err))
		return
	}
	f.mu.Lock()
	f.pauses.Invisible = true
	f.mu.Unlock()
}

func (f *family) pausesVisible(err error) {
	f.mu.Lock()
	f.pauses.Invisible = false
	f.pauses.VisibleWhy = err.Error()
	f.mu.Unlock()
	f.warn(fmt.Sprintf("traced processes cannot be held invisibly (%v): they are paused with SIGSTOP for uprobe attaches, which their parent can see (a wrapper such as `perf trace --` may take it for the end of its command)", err))
}

// heldInvisibly says whether the warden holds the family, and why not.
func (f *family) heldInvisibly() (bool, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.warden == nil || f.pauses == nil || !f.pauses.Invisible {
		why := ""
		if f.pauses != nil {
			why = f.pauses.VisibleWhy
		}
		return false, why
	}
	return true, ""
}

// closeWarden detaches the warden from every process it holds and keeps
// its counts in the metadata.
func (f *family) closeWarden() {
	if f.warden == nil {
		return
	}
	st, err := f.warden.Close()
	if err != nil {
		f.warn(err.Error())
	}
	f.mu.Lock()
	f.pauses.Held, f.pauses.MaxHoldNS = st.Held, st.MaxHold.Nanoseconds()
	f.mu.Unlock()
}

// unheld counts the pauses the kernel asked for and the warden did not
// take (bpf.Tracer.StopsUnheld); false when the family was never held.
func (f *family) unheld(n uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pauses == nil {
		return false
	}
	f.pauses.Unheld = n
	return true
}

// cont lets go a process the kernel stopped for a uprobe attach: the
// warden releases it, or SIGCONT continues it. A failure leaves it
// stopped, so it is said and kept in the metadata; retrying cannot help.
// A process that is gone (ESRCH) is not stopped.
func (f *family) cont(pid int, why string) {
	if f.warden != nil {
		if err := f.warden.Release(pid); err != nil {
			f.warn(fmt.Sprintf("process %d, held %s, could not be released: %v", pid, why, err))
		}
		return
	}
	err := unix.Kill(pid, unix.SIGCONT)
	if err == nil || errors.Is(err, unix.ESRCH) {
		return
	}
	errno := 0
	var en unix.Errno
	if errors.As(err, &en) {
		errno = int(en)
	}
	f.warn(fmt.Sprintf("process %d, stopped %s, could not be continued and may still be stopped: %v (errno %d); `kill -CONT %d` releases it", pid, why, err, errno, pid))
}

// continueStopped sends SIGCONT to traced processes the kernel stopped
// for a uprobe attach whose mmap event nobody read (they outlived the
// command and mapped a file after the ring was last read), and says how
// many it found.
func (f *family) continueStopped() int {
	f.mu.Lock()
	pids := slices.Collect(maps.Keys(f.procs))
	f.mu.Unlock()
	n := 0
	for _, pid := range pids {
		if proc.State(pid) == 'T' {
			f.cont(pid, "after the recording")
			f.warn(fmt.Sprintf("process %d was left stopped after the recording; it was continued", pid))
			n++
		}
	}
	return n
}

// onTask keeps the set of traced processes alive, and has the warden
// seize a traced process's new threads.
func (f *family) onTask(e *wire.TaskEvent) {
	f.mu.Lock()
	switch e.Kind {
	case uint32(wire.TaskKindTASKEV_FORK):
		f.procs[int(e.Child)] = true
		f.nprocs++
		f.forked = append(f.forked, int(e.Child))
	case uint32(wire.TaskKindTASKEV_EXIT):
		delete(f.procs, int(e.Hdr.Tgid))
	}
	f.mu.Unlock()
	if e.Kind == uint32(wire.TaskKindTASKEV_THREAD) && f.warden != nil {
		// A warden already gone holds nothing: nothing to say.
		_ = f.warden.SeizeThreads(int(e.Hdr.Tgid))
	}
}

// familyPoll is how often the traced set is looked at once the command
// has exited.
const familyPoll = 20 * time.Millisecond

// await waits, once the command has exited, for every process it left
// behind that is still traced (traced lists them: a daemon it started, a
// child its wrapper did not wait for): the recording lasts while any
// lives. Ctrl-C (ctx) ends it early, and the run names those left
// running.
func (f *family) await(ctx context.Context, traced func() ([]int, error)) {
	for {
		live, err := traced()
		if err != nil {
			f.warn(err.Error())
			return
		}
		if len(live) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			slices.Sort(live)
			f.mu.Lock()
			f.known().LeftRunning = live
			f.mu.Unlock()
			f.warn(fmt.Sprintf("the recording was interrupted while %d processes of the command still ran (%v): what they did after is not in the record", len(live), live))
			return
		case <-time.After(familyPoll):
		}
	}
}

// orphanWait bounds how long an orphan that left the traced set is
// waited for to be reported exited: it is still ending, or the warden
// still holds its exit stop.
const orphanWait = 2 * time.Second

// reapOrphans reaps the command's processes that were reparented to
// iocorr (launch.BecomeSubreaper) and adds their rusage to the command's:
// the kernel would have added it to the parent's had the parent waited,
// and the run's rusage oracle is the whole family's. Processes still
// running (an interrupted recording) are left alone.
func (f *family) reapOrphans(exit *launch.Exit) {
	f.mu.Lock()
	pids := slices.Clone(f.forked)
	left := f.record != nil && len(f.record.LeftRunning) > 0
	f.mu.Unlock()
	wait := orphanWait
	if left {
		wait = 0
	}
	o := launch.ReapOrphans(pids, wait)
	if len(o.PIDs) == 0 {
		return
	}
	exit.AddRusage(&o.Rusage)
	f.mu.Lock()
	f.known().Orphans = o.PIDs
	f.mu.Unlock()
}

// ended records how many processes were traced in all, once the
// recording has ended.
func (f *family) ended() {
	f.mu.Lock()
	f.known().Processes = f.nprocs
	f.mu.Unlock()
}

// known is the family's record, made at its first fact; f.mu is held.
func (f *family) known() *rundir.Family {
	if f.record == nil {
		f.record = &rundir.Family{}
	}
	return f.record
}

// meta puts the pauses and the family, copied, into m.
func (f *family) meta(m *rundir.Meta) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m.Pauses, m.Family = nil, nil
	if f.pauses != nil {
		p := *f.pauses
		m.Pauses = &p
	}
	if f.record != nil {
		r := *f.record
		r.LeftRunning, r.Orphans = slices.Clone(r.LeftRunning), slices.Clone(r.Orphans)
		m.Family = &r
	}
}
