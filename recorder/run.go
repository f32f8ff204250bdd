package recorder

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// recordGCPercent is the GOGC of a recording (Run says why).
const recordGCPercent = 400

// Run records o.Argv into o.Dir. An error before the command started
// leaves Result.Ran false (and, once the directory exists, a meta.json
// saying why); an error of the recording itself (a full disk) comes with
// a Result that says what was captured.
//
// The steps, in order: prepare the run directory and its first metadata;
// open the tracer session and add the models; create the spool; launch
// the command held and set it up (memory cgroup, probes on its
// executable, page cache); trace it from its release to its end; finish
// the metadata. Each resource is released by a defer next to its
// creation; a step that fails finishes the metadata with its error
// (abort) and returns.
func Run(ctx context.Context, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Stderr == nil {
		o.Stderr = os.Stderr
	}
	if err := prepareRunDir(o.Dir, o.Force); err != nil {
		return Result{}, err
	}
	// Loading the tracer parses the kernel's BTF and the libraries'
	// symbol tables: tens of MB of short-lived garbage that, at the
	// default GOGC, started a collection every few MB while the heap was
	// small. A recording's CPU counts against the run it measures (issue
	// 18): at 400, cold 16-token runs here cost the recorder about 50 ms
	// (a fifth) less, for 6 MiB more peak RSS.
	defer debug.SetGCPercent(debug.SetGCPercent(recordGCPercent))
	// Whatever happens from here, the run directory belongs to the person
	// who ran sudo (or --user), not to root.
	defer func() {
		if err := ChownRun(o.Dir, o.User); err != nil {
			fmt.Fprintf(o.Stderr, "iocorr: %v\n", err)
		}
	}()

	var plan *pin.Plan
	var err error
	if o.Pin != "" {
		// Refused before anything is created: another model's plan, one
		// larger than the budget, one RLIMIT_MEMLOCK would refuse.
		if plan, err = pin.Read(o.Pin); err == nil {
			err = pin.Check(plan, o.MemLimit)
		}
		if err != nil {
			return Result{}, fmt.Errorf("--pin: %w", err)
		}
	}
	r, err := prepare(&o)
	if err != nil {
		return Result{}, err
	}
	if o.PID != 0 {
		return r.runAttached(ctx)
	}
	sess, err := r.startSession()
	if err != nil {
		return Result{}, err
	}
	defer sess.close()
	if o.DropCaches {
		if err := pagecache.DropCaches(); err != nil {
			return Result{}, r.abort(err)
		}
	}

	// Before the fork: a process of the command orphaned by its parent
	// comes back to iocorr, with its rusage (reapOrphans).
	restore, err := launch.BecomeSubreaper()
	defer restore()
	if err != nil {
		r.warn(err.Error() + ": processes of the command orphaned by their parent are not in the run's rusage")
	}
	if r.spool, err = createSpool(o.Dir); err != nil {
		return Result{}, r.abort(err)
	}
	defer r.spool.close()
	child, err := r.launch()
	if err != nil {
		return Result{}, r.abort(err)
	}
	// Kills the child if it never ran; once it ran, it was reaped at its
	// end, and this finds nothing to do.
	defer child.Abort()
	cg, err := r.limitMemory(child.PID())
	if cg != nil {
		// Deferred, so that every way out (an error, Ctrl-C) removes it.
		defer func() {
			if err := cg.Remove(); err != nil {
				fmt.Fprintf(r.stderr, "iocorr: %v\n", err)
			}
		}()
	}
	if err != nil {
		return Result{}, r.abort(err)
	}
	r.attachStatic()
	if err := r.setPageCache(); err != nil {
		return Result{}, r.abort(err)
	}
	if plan != nil {
		// After the eviction, so that the pinned pages are read again and
		// charged to the command's cgroup.
		h, err := pin.Hold(plan.Model.Path, plan.Spans(), cg.Add)
		if err != nil {
			return Result{}, r.abort(fmt.Errorf("--pin: %w", err))
		}
		defer func() {
			if err := h.Release(); err != nil {
				fmt.Fprintf(r.stderr, "iocorr: --pin: %v\n", err)
			}
		}()
		r.m.Controls.Pinned = &rundir.Pinned{Plan: o.Pin, Model: plan.Model.Path, Ranges: len(plan.Ranges), Bytes: h.Bytes, HolderAnon: h.Anon}
	}
	if err := r.startPrefetch(cg); err != nil {
		return Result{}, r.abort(err)
	}
	// Ended before the cgroup is removed (the defers run in reverse): the
	// helper is in it. A no-op once the run ended in order.
	defer r.stopPrefetch()
	// Ctrl-C during the set-up (eviction of a large model takes a while)
	// means the command should not start at all.
	if ctx.Err() != nil {
		return Result{}, r.abort(errors.New("interrupted before the command started"))
	}

	end, err := r.trace(ctx, child)
	if err != nil {
		return Result{}, r.abort(err)
	}

	r.stopPrefetch()
	r.recordEnd(end, cg)
	r.finish(&end.exit, end.err)
	// Nothing reads the ring from here on: detach before anything slow,
	// so that a process the command left behind is neither stopped for
	// uprobes nor slowed by probes.
	sess.close()
	if r.fam.warden == nil && r.fam.continueStopped() > 0 {
		r.finishMeta()
	}
	res := Result{Meta: r.m, Stats: r.stats.snapshot(r.spool.counts.Total()), Signals: end.sigs, Ran: true}
	if end.err != nil {
		return res, fmt.Errorf("%w (the run directory holds what was captured)", end.err)
	}
	return res, nil
}

// prepare writes the run's first metadata, so that whatever happens later
// the directory says what was attempted (Finished stays false until the
// end), and holds back the disk space its last one needs.
func prepare(o *Options) (*recording, error) {
	r := &recording{runMeta: runMeta{dir: o.Dir, stderr: o.Stderr}, o: o, probed: newProbedFiles()}
	r.fam = newFamily(r.warn)
	r.m = rundir.Meta{
		Version: o.Version, Command: o.Argv, Host: proc.HostInfo(), ProbeSet: o.Probes.String(), Tier: o.Probes.Tier(),
		Controls:  rundir.Controls{Cold: o.Cold, DropCaches: o.DropCaches, MemLimit: o.MemLimit},
		GoVersion: runtime.Version(), Lost: map[string]uint64{}, Counts: map[string]uint64{},
		Start: time.Now(),
	}
	if err := r.open(r.snapshot); err != nil {
		return nil, err
	}
	if o.Probes.Ops {
		r.ops = newOpCosts(func(first bpf.FirstInstruction) (bpf.UprobeCost, error) {
			return bpf.MeasureUprobeCost(2000, 3, first)
		})
	}
	return r, nil
}

// startSession opens the tracer session and tells it the models known
// before the command starts. An error ends the recording (abort), the
// session closed again.
func (r *recording) startSession() (*session, error) {
	sess, err := openSession(r.o)
	if err != nil {
		return nil, fmt.Errorf("%w; `iocorr doctor` checks this machine", r.abort(err))
	}
	r.sess = sess
	for _, w := range refusals(sess.tr.Capabilities()) {
		r.warn(w)
	}
	if err := r.addModels(); err != nil {
		err = r.abort(err)
		sess.close()
		return nil, fmt.Errorf("--model: %w", err)
	}
	return sess, nil
}

// addModels tells the tracer the model files known before the command
// starts: --model files, and files the command line names.
func (r *recording) addModels() error {
	r.models = newModels(r.warn, func(mf *rundir.ModelFile) error {
		if err := r.sess.tr.AddFile(mf.Dev, mf.Ino); err != nil {
			return err
		}
		if mf.Block.DiskDev != 0 {
			return r.sess.tr.AddDevice(mf.Block.DiskDev)
		}
		return nil
	})
	for _, p := range r.o.Models {
		if _, err := r.models.add(p); err != nil {
			return err
		}
	}
	// Files on the command line are a guess: one that is not a usable
	// model is not a reason to stop.
	for _, p := range candidatesInArgs(r.o.Argv) {
		if _, err := r.models.add(p); err != nil {
			r.warn(err.Error())
		}
	}
	return nil
}

// launch starts the command held: it exists, with its pid, but runs none
// of its code until trace releases it.
func (r *recording) launch() (*launch.Child, error) {
	child, err := launch.StartHeld(r.o.Argv, r.o.User, r.o.Stdout, r.o.Stderr, r.sess.tr)
	if err != nil {
		return nil, err
	}
	r.fam.first(child.PID())
	r.m.Child.PID = child.PID()
	if r.o.User != nil {
		r.m.Child.UID, r.m.Child.GID = int(r.o.User.UID), int(r.o.User.GID)
	}
	return child, nil
}

// limitMemory puts the held child pid in a memory cgroup of --mem-limit.
// The cgroup comes back whenever it was made, also with an error, so
// that the caller removes it.
func (r *recording) limitMemory(pid int) (*cgroup.Cgroup, error) {
	if r.o.MemLimit <= 0 {
		return nil, nil
	}
	cg, err := cgroup.NewMemory(cgroup.Name(pid), r.o.MemLimit)
	if err != nil {
		return nil, err
	}
	r.m.Controls.Cgroup, r.m.Controls.CgroupVer = cg.Path, cg.Version
	return cg, cg.Add(pid)
}

// attachStatic probes the executable and the --lib files. The executable
// is mapped by execve, not by mmap, so the kernel cannot stop the child
// for it: it is probed now.
func (r *recording) attachStatic() {
	if exe, err := lookPath(r.o.Argv[0]); err == nil {
		r.attach(exe)
	}
	for _, l := range r.o.Libs {
		r.attach(l)
	}
}

// setPageCache evicts the known models (--cold) or notes how much of
// them the page cache holds before the run.
func (r *recording) setPageCache() error {
	if r.o.Cold {
		if len(r.models.files()) == 0 {
			r.warn("--cold: no model file is known before the command starts, nothing was evicted (name it with --model)")
		}
		for i, mf := range r.models.files() {
			res, pages, err := pagecache.Evict(mf.Path)
			if err != nil {
				return err
			}
			r.models.setResident(i, res)
			if res > 0 {
				r.warn(fmt.Sprintf("--cold: %d of %d pages of %s stayed in the page cache", res, pages, mf.Path))
			}
		}
		return nil
	}
	for i, mf := range r.models.files() {
		res, _, err := pagecache.Residency(mf.Path)
		if err != nil {
			r.warn(fmt.Sprintf("model %s: page-cache residency before the run is unknown: %v", mf.Path, err))
			continue
		}
		r.models.setResident(i, res)
	}
	return nil
}

// abort ends a recording whose command never ran: the warden lets go
// and the metadata is finished with err, which it returns. The held
// child and the spool are Run's defers'.
func (r *recording) abort(err error) error {
	r.fam.closeWarden()
	r.finish(nil, err)
	return err
}

// ended is how the traced command ended and what the recording saw of it.
type ended struct {
	exit    launch.Exit
	sigs    launch.Signals
	monoNS  uint64
	at      time.Time
	disk    []rundir.DiskStat
	diskErr error
	err     error // the recording's own: a full disk, a spool that failed
}

// trace releases the command and reads the ring into the spool until it
// ends, then takes the end stamps. An error means the command could not
// be released (and never ran).
func (r *recording) trace(ctx context.Context, child *launch.Child) (ended, error) {
	tr := r.begin()
	stopForward := child.ForwardSignals()
	r.cost.released()
	if err := child.Release(); err != nil {
		stopForward()
		tr.stopDrain()
		<-tr.drainErr
		tr.stopProgress()
		r.stopSnapshots()
		r.writer.stop()
		return ended{}, err
	}

	var e ended
	drained, derr := r.wait(child.Done(), tr.drainErr)
	e.err = derr
	e.sigs = stopForward()
	e.exit = child.Wait()
	r.cost.exited()
	if !drained {
		r.fam.await(ctx, r.sess.tr.TracedProcesses)
	}
	r.fam.reapOrphans(&e.exit)
	e.monoNS, e.at = proc.MonotonicNS(), time.Now()
	// Right at the end stamp, as DiskBefore is right before the start
	// stamp: block completions stamped inside [start, end] are then what
	// the device's own counters saw in between.
	e.disk, e.diskErr = blockdev.DiskStats()
	if err := r.end(tr, drained); e.err == nil {
		e.err = err
	}
	// Nothing releases a pause from here on: the warden lets every
	// process go.
	r.fam.closeWarden()
	return e, nil
}

// tracing is what begin started and end stops.
type tracing struct {
	stopDrain    context.CancelFunc
	drainErr     chan error
	stopProgress func()
}

// begin takes the start stamps (the disk's counters right before the
// monotonic start) and starts reading the ring into the spool, the
// progress line and the residency snapshots: the first step of a launched
// and an attached recording alike.
func (r *recording) begin() tracing {
	disk, err := blockdev.DiskStats()
	if err != nil {
		r.warn(fmt.Sprintf("disk counters before the run are unknown: %v", err))
	}
	r.m.DiskBefore = disk
	r.m.MonoStartNS = proc.MonotonicNS()
	r.m.Start = time.Now()
	// From here the drain goroutine adds to the metadata; every later
	// change goes through r.mu, and the writer keeps meta.json current.
	r.writer.start()
	r.writer.changed()

	drainCtx, stopDrain := context.WithCancel(context.Background())
	tr := tracing{stopDrain: stopDrain, drainErr: make(chan error, 1)}
	go func() { tr.drainErr <- r.spool.drain(drainCtx, r.sess.tr.RingBuf(), r.act) }()
	tr.stopProgress = r.stats.report(r.o.Progress, &r.spool.counts, r.m.Start)
	if r.o.PrefetchOnly {
		// `iocorr prefetch` keeps no recording: no residency to take.
		return tr
	}
	snaps, err := startSnapshots(r.o.Dir, r.models, r.warn, r.sess.tr, r.o.ExactSnapshots,
		func(pid int) { r.fam.cont(pid, "for its token's residency snapshot") })
	if err != nil {
		r.warn(err.Error())
	}
	r.snaps = snaps
	return tr
}

// end, after the end stamps, reads the models' residency at the end,
// puts the pending page-cache runs in the ring, reads it to its end
// (unless the drain already ended: drained), and stops the snapshots,
// the progress line and the metadata writer; its error is the drain's or
// the spool's.
func (r *recording) end(tr tracing, drained bool) error {
	r.residentEnd()
	// The models' page-cache events stop here, so that the runs flushed
	// next hold every one recorded: reclaim after the snapshot would
	// otherwise leave a run pending, in no record, behind others that
	// are.
	for _, mf := range r.models.files() {
		if err := r.sess.tr.RemoveFile(mf.Dev, mf.Ino); err != nil {
			r.warn(err.Error() + ": its page-cache events after the residency snapshot at the end may be partly recorded")
		}
	}
	// Page-cache runs still pending in the kernel, up to the residency
	// snapshot just taken, go to the ring before it is read to its end.
	if err := r.sess.tr.FlushPageRuns(); err != nil {
		r.warn(err.Error() + ": the last page-cache adds and deletions of the run are missing")
	}
	tr.stopDrain()
	var err error
	if !drained {
		if err = <-tr.drainErr; errors.Is(err, context.Canceled) {
			err = nil
		}
	}
	if !drained {
		r.takeUnfinishedBlockRequests()
		r.takeUnreadBufNames()
		// Counts lost are figures missing from every table: the run is
		// incomplete, and its status says why wherever it is read.
		if ferr := r.takeFaultCounts(); err == nil {
			err = ferr
		}
	}
	// After the drain: it hands the snapshotter its token starts.
	r.stopSnapshots()
	r.filemapFaults = r.kernelCounts()
	tr.stopProgress()
	r.writer.stop()
	if cerr := r.spool.close(); err == nil {
		err = cerr
	}
	return err
}

// takeFaultCounts puts the kernel's counts of faults outside the model
// files in the spool, after the ring's last record: a record per thread,
// stamp and class stands for that many fault records.
func (r *recording) takeFaultCounts() error {
	evs, err := r.sess.tr.FaultCounts()
	if err != nil {
		return fmt.Errorf("the faults outside the model files are missing from the record: %w", err)
	}
	for i := range evs {
		if err := r.spool.append(wire.EventTypeEV_FAULT_COUNT, ingest.Bytes(&evs[i])); err != nil {
			return fmt.Errorf("%d counts of faults outside the model files are missing: %w", len(evs)-i, err)
		}
		// The summary's fault figures count them as they counted records.
		if d, ok := ingest.Decode(ingest.Bytes(&evs[i]), &r.dec); ok {
			r.stats.observe(d, r.models)
		}
	}
	return nil
}

// takeUnfinishedBlockRequests puts the block requests BPF saw issued and
// not complete, after the ring's last record, in the spool: their bytes
// were moved whether or not their completion reached BPF.
func (r *recording) takeUnfinishedBlockRequests() {
	evs, err := r.sess.tr.TakeUnfinishedBlockRequests(proc.MonotonicNS())
	if err != nil {
		r.warn(err.Error())
	}
	for i := range evs {
		if err := r.spool.append(wire.EventTypeEV_BLOCK, ingest.Bytes(&evs[i])); err != nil {
			r.warn(fmt.Sprintf("the run's %d unfinished block requests are missing: %v", len(evs)-i, err))
			return
		}
		r.blockUnfinished++
	}
}

// wait waits for the command to end (done). The drain ends early only on a spool
// error (a full disk), which it returns with drained set. The ring must
// still be read then: the kernel stops a process that maps a new
// executable and waits for user space to let it go.
func (r *recording) wait(done <-chan struct{}, drainErr <-chan error) (drained bool, err error) {
	select {
	case <-done:
		return false, nil
	case err = <-drainErr:
	}
	r.warn(fmt.Sprintf("recording stopped early, the command ran on unrecorded: %v", err))
	dctx, stopDiscard := context.WithCancel(context.Background())
	type discard struct {
		n   uint64
		err error
	}
	discarded := make(chan discard, 1)
	go func() {
		n, err := bpf.Discard(dctx, r.sess.tr.RingBuf(), r.act)
		discarded <- discard{n, err}
	}()
	<-done
	stopDiscard()
	d := <-discarded
	if d.n > 0 {
		r.warn(fmt.Sprintf("%d events that arrived after the spool failed are not in the record", d.n))
	}
	if d.err != nil {
		r.warn(fmt.Sprintf("the ring buffer could not be read to its end after the spool failed: %v", d.err))
	}
	return true, err
}

// recordEnd puts how the command ended into the metadata: its exit and
// rusage, the end stamps, the disk and cgroup counters, the record counts,
// and warnings for what went wrong.
func (r *recording) recordEnd(e ended, cg *cgroup.Cgroup) {
	r.m.MonoEndNS, r.m.End = e.monoNS, e.at
	r.m.Child.ExitCode, r.m.Child.Signal = e.exit.Code, e.exit.Signal
	ru := e.exit.Rusage
	r.m.Child.MajFlt, r.m.Child.MinFlt = ru.Majflt, ru.Minflt
	r.m.Child.InBlock, r.m.Child.OutBlock, r.m.Child.MaxRSSKiB = ru.Inblock, ru.Oublock, ru.Maxrss
	r.m.Child.UserNS, r.m.Child.SystemNS = syscall.TimevalToNsec(ru.Utime), syscall.TimevalToNsec(ru.Stime)
	if r.m.DiskAfter = e.disk; e.diskErr != nil {
		r.warn(fmt.Sprintf("disk counters after the run are unknown: %v", e.diskErr))
	}
	if cg != nil {
		r.m.Controls.CgroupCounters = cg.Counters()
	}
	if r.models != nil {
		r.m.Disk = diskProfile(r.models.files(), r.warn)
	}
	r.m.Counts = r.spool.counts.Map()
	if r.filemapFaults != nil {
		r.filemapFaults(r.m.Counts)
	}
	r.fam.ended()
	if r.dec.Short+r.dec.Unknown > 0 {
		r.warn(fmt.Sprintf("%d records too short for their type and %d of unknown type were not looked at while recording", r.dec.Short, r.dec.Unknown))
	}
	if e.sigs.Received > 0 {
		r.warn(fmt.Sprintf("the command was interrupted (%d signal(s) received, %d forwarded; the terminal delivered the rest itself)", e.sigs.Received, e.sigs.Forwarded))
	}
	if e.exit.Signal != "" {
		hint := ""
		if e.exit.Signal == "SIGKILL" && cg != nil {
			cs := r.m.Controls.CgroupCounters
			hint = " (" + killedUnder(r.o.MemLimit, max(cs["memory.peak"], cs["memory.max_usage_in_bytes"]), r.copies.byName()) + ")"
		}
		r.warn(fmt.Sprintf("the command was killed by %s%s", e.exit.Signal, hint))
	}
}

// stopSnapshots ends the residency snapshots and puts what they did in
// the metadata.
func (r *recording) stopSnapshots() {
	if r.snaps == nil {
		return
	}
	st := r.snaps.stop()
	r.update(func(m *rundir.Meta) { m.ResidencySnapshots = &st })
}
