package recorder

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/rundir"
)

// holdInvisibly puts pid (and, from now on, every thread and process it
// starts) under the ptrace warden, so that the pauses for uprobe attaches
// are seen by nobody in its family. The warden starts with the first
// process; when it cannot (ptrace not allowed, the process traced by a
// debugger already) pauses stay SIGSTOPs, which the process's parent can
// see, and the run says so.
func (r *recording) holdInvisibly(pid int) {
	if r.m.Pauses == nil {
		r.m.Pauses = &rundir.Pauses{}
		w, err := launch.StartWarden(r.warn)
		if err != nil {
			r.pausesVisible(err)
			return
		}
		r.warden = w
	}
	if r.warden == nil {
		return
	}
	if err := r.warden.Seize(pid); err != nil {
		r.closeWarden()
		r.warden = nil
		r.m.Pauses.Held, r.m.Pauses.MaxHoldNS = 0, 0
		r.pausesVisible(fmt.Errorf("process %d: %w", pid, err))
		return
	}
	r.m.Pauses.Invisible = true
}

func (r *recording) pausesVisible(err error) {
	r.m.Pauses.Invisible = false
	r.m.Pauses.VisibleWhy = err.Error()
	r.warn(fmt.Sprintf("traced processes cannot be held invisibly (%v): they are paused with SIGSTOP for uprobe attaches, which their parent can see (a wrapper such as `perf trace --` may take it for the end of its command)", err))
}

// closeWarden detaches the warden from every process it holds and keeps
// its counts in the metadata; only the first call does it.
func (r *recording) closeWarden() {
	if r.warden == nil {
		return
	}
	st, err := r.warden.Close()
	if err != nil {
		r.warn(err.Error())
	}
	r.update(func(m *rundir.Meta) {
		m.Pauses.Held, m.Pauses.MaxHoldNS = st.Held, st.MaxHold.Nanoseconds()
	})
}

// familyPoll is how often the traced set is looked at once the command
// has exited.
const familyPoll = 20 * time.Millisecond

// awaitFamily waits, once the command has exited, for every process it
// left behind that is still traced (a daemon it started, a child its
// wrapper did not wait for): the recording lasts while any lives. Ctrl-C
// (ctx) ends it early, and the run names those left running.
func (r *recording) awaitFamily(ctx context.Context) {
	for {
		live, err := r.tr.TracedProcesses()
		if err != nil {
			r.warn(err.Error())
			return
		}
		if len(live) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			slices.Sort(live)
			r.update(func(m *rundir.Meta) {
				if m.Family == nil {
					m.Family = &rundir.Family{}
				}
				m.Family.LeftRunning = live
			})
			r.warn(fmt.Sprintf("the recording was interrupted while %d processes of the command still ran (%v): what they did after is not in the record", len(live), live))
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
func (r *recording) reapOrphans(exit *launch.Exit) {
	r.mu.Lock()
	pids := slices.Clone(r.forked)
	left := r.m.Family != nil && len(r.m.Family.LeftRunning) > 0
	r.mu.Unlock()
	wait := orphanWait
	if left {
		wait = 0
	}
	o := launch.ReapOrphans(pids, wait)
	if len(o.PIDs) == 0 {
		return
	}
	exit.AddRusage(&o.Rusage)
	r.update(func(m *rundir.Meta) {
		if m.Family == nil {
			m.Family = &rundir.Family{}
		}
		m.Family.Orphans = o.PIDs
	})
}
