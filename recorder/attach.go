package recorder

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/procmaps"
	"github.com/iocorr/iocorr/rundir"
)

func cmdlineOf(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

// attachedPoll is how often record -p looks whether the process still runs.
const attachedPoll = 20 * time.Millisecond

// runAttached is Run for a process that already runs (`record -p`). The
// steps: open the tracer and the spool; seize the process (the warden
// follows its threads and the children it starts) and freeze it; read
// its major-fault count, put it in the traced set, probe every executable
// file it maps and take every GGUF file it maps as a model; let it go;
// record until the window ends, ctx ends or it exits; freeze it again,
// read the count, detach everything and let it go, running as before.
func (r *recording) runAttached(ctx context.Context) (Result, error) {
	o := r.o
	pid := o.PID
	r.m.Command = cmdlineOf(pid)
	sess, err := r.startSession()
	if err != nil {
		return Result{}, err
	}
	defer sess.close()
	if r.spool, err = createSpool(o.Dir); err != nil {
		return Result{}, r.abort(err)
	}
	defer r.spool.close()
	r.m.Child.PID = pid
	r.fam.first(pid)
	defer r.fam.closeWarden()
	if ok, why := r.fam.heldInvisibly(); !ok {
		return Result{}, r.abort(fmt.Errorf("process %d cannot be attached to without ptrace: %s", pid, why))
	}
	w := r.fam.warden
	if err := w.Freeze(pid); err != nil {
		return Result{}, r.abort(err)
	}
	st, err := proc.ReadStat(pid)
	before := st.MajFlt
	if err == nil {
		err = r.sess.tr.TracePID(pid)
	}
	if err != nil {
		w.Thaw(pid)
		return Result{}, r.abort(err)
	}
	r.m.Attached = &rundir.Attached{PID: pid, MajFltBefore: before}
	r.probeMapped(pid)

	tr := r.begin()
	if err := w.Thaw(pid); err != nil {
		r.warn(err.Error())
	}
	exited := r.watch(ctx, pid, tr.drainErr)
	// Frozen (or gone), the process adds nothing to its count while it
	// is read and the record is closed.
	if !exited {
		if err := w.Freeze(pid); err != nil {
			r.warn(err.Error())
		}
	}
	if st, err := proc.ReadStat(pid); err == nil {
		after := st.MajFlt
		r.m.Attached.MajFltAfter = after
	} else {
		r.warn(fmt.Sprintf("process %d ended and was reaped within the window: its major-fault count at the end is unknown", pid))
	}
	r.m.Attached.Exited = exited
	r.m.MonoEndNS, r.m.End = proc.MonotonicNS(), time.Now()
	r.m.DiskAfter, err = blockdev.DiskStats()
	if err != nil {
		r.warn(fmt.Sprintf("disk counters after the run are unknown: %v", err))
	}
	derr := r.end(tr, false)
	a := r.m.Attached
	if a.MajFltAfter >= a.MajFltBefore {
		r.m.Child.MajFlt = int64(a.MajFltAfter - a.MajFltBefore)
	}
	r.m.Counts = r.spool.counts.Map()
	r.fam.ended()
	r.finish(&launch.Exit{}, derr)
	// Nothing is recorded from here: the probes come off while the
	// process is still frozen, then it runs on, detached; the pauses'
	// counts come with the detach.
	sess.close()
	if !exited {
		if err := w.Thaw(pid); err != nil {
			r.warn(err.Error())
		}
	}
	r.fam.closeWarden()
	r.finishMeta()
	res := Result{Meta: r.m, Stats: r.stats.snapshot(r.spool.counts.Total()), Ran: true}
	if derr != nil {
		return res, fmt.Errorf("%w (the run directory holds what was captured)", derr)
	}
	return res, nil
}

// watch waits for the end of an attached recording's window: the
// duration, Ctrl-C (ctx), the process's exit, or the drain's early end
// (whose error it puts back for end to read). It says whether the
// process exited.
func (r *recording) watch(ctx context.Context, pid int, drainErr chan error) (exited bool) {
	var window <-chan time.Time
	if r.o.Duration > 0 {
		window = time.After(r.o.Duration)
	}
	tick := time.NewTicker(attachedPoll)
	defer tick.Stop()
	for {
		select {
		case <-window:
			return false
		case <-ctx.Done():
			return false
		case derr := <-drainErr:
			r.warn(fmt.Sprintf("recording stopped early: %v", derr))
			drainErr <- derr
			return false
		case <-tick.C:
			if st, err := proc.ReadStat(pid); err != nil || st.State == 'Z' || st.State == 'X' {
				return true
			}
		}
	}
}

// probeMapped probes every executable file pid maps and takes every GGUF
// file it maps as a model (with a maps snapshot for the joins), as the
// launch does for files mapped while it is traced.
func (r *recording) probeMapped(pid int) {
	ms, err := procmaps.Read(pid)
	if err != nil {
		r.warn(fmt.Sprintf("process %d: %v", pid, err))
		return
	}
	// A library's first mapping is often not its executable one.
	seen, probed := map[string]bool{}, map[string]bool{}
	model := false
	for _, m := range ms {
		if m.Path == "" || !strings.HasPrefix(m.Path, "/") {
			continue
		}
		if strings.Contains(m.Perms, "x") && !probed[m.Path] {
			probed[m.Path] = true
			r.attach(m.Path)
		}
		if seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		if isGGUF(m.Path) {
			if _, err := r.models.add(m.Path); err != nil {
				r.warn(err.Error())
				continue
			}
			model = true
		}
	}
	for _, p := range candidatesIn(cmdlineOf(pid), fmt.Sprintf("/proc/%d/cwd", pid), r.models.has) {
		if _, err := r.models.add(p); err != nil {
			r.warn(err.Error())
		}
	}
	if !model {
		return
	}
	snap, err := proc.SnapshotMaps(r.o.Dir, r.probed.nextMaps(), pid, proc.MonotonicNS())
	if err != nil {
		r.warn(err.Error())
		return
	}
	r.m.Maps = append(r.m.Maps, snap)
}
