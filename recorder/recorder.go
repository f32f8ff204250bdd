// Package recorder runs a command under the BPF tracer and writes a run
// directory: the event spool, the maps snapshots and meta.json. It is the
// lifecycle of `iocorr record` as a library: cmd/iocorr only turns flags
// into Options.
//
// meta.json is kept true while the command runs: it is rewritten whenever
// something attribution needs becomes known (a model's tensor table and
// extents, a probed library, a maps snapshot), so that a recorder killed
// mid-run (SIGKILL, the OOM killer) leaves a run that ingest can still
// attribute. Meta.Finished is set only by an orderly end.
package recorder

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/experiment"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
)

// Options are everything a recording needs, as `iocorr record` flags give
// them.
type Options struct {
	Dir   string   // the run directory to write
	Force bool     // replace an existing run directory
	Argv  []string // the command
	// ProbeOps also probes every op function (costlier) besides one hit
	// per graph.
	ProbeOps bool
	// ProbeSched records context switches and wakeups of traced threads.
	ProbeSched bool
	Libs       []string // further ELF files to probe
	Models     []string // model files to trace from the start
	// Cold evicts the known model files from the page cache before the
	// command starts; DropCaches drops the whole page cache.
	Cold, DropCaches bool
	MemLimit         int64 // bytes of a memory cgroup for the command; 0: none
	// User runs the command as someone else and hands them the run
	// directory; nil keeps the recorder's identity.
	User         *experiment.User
	RingBufBytes int
	Version      string // iocorr's version, for meta.json

	// Stdout and Stderr receive the command's output; Stderr also gets
	// the recorder's warnings. Nil means os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Progress, when set, is called every ProgressInterval while the
	// command runs, and once more with Done set when it has ended.
	Progress func(Progress)
}

// ProgressInterval is how often Options.Progress is called.
const ProgressInterval = 500 * time.Millisecond

// Result is what became of a recording that started the command.
type Result struct {
	Meta rundir.Meta // as written to meta.json
	// Stats are the figures counted live from the records.
	Stats Stats
	// Signals are the terminating signals the recorder received while the
	// command ran (they were for the command).
	Signals experiment.Signals
	// Ran says the command was started; without it the other fields are
	// zero.
	Ran bool
}

// OptionError is an option value that cannot work.
type OptionError struct{ Msg string }

func (e *OptionError) Error() string { return e.Msg }

func optionf(format string, a ...any) error { return &OptionError{fmt.Sprintf(format, a...)} }

// Validate checks the options before anything is created: bad values are
// an *OptionError, a missing command or file another error.
func (o *Options) Validate() error {
	if len(o.Argv) == 0 {
		return optionf("no command given")
	}
	if o.Dir == "" {
		return optionf("no run directory given")
	}
	if n := o.RingBufBytes; n < os.Getpagesize() || n&(n-1) != 0 || n > 1<<30 {
		return optionf("ring buffer size %d: want a power of two from 4KiB to 1GiB", n)
	}
	if o.MemLimit != 0 && o.MemLimit < 1<<20 {
		return optionf("memory limit %d is below 1MiB: the command could not even start", o.MemLimit)
	}
	if _, err := exec.LookPath(o.Argv[0]); err != nil {
		return err
	}
	for _, p := range append(append([]string(nil), o.Models...), o.Libs...) {
		if _, err := os.Stat(p); err != nil {
			return err
		}
	}
	return nil
}

// openTracer is bpf.Open. A test replaces it to see a tracer that cannot
// attach: a tracepoint cannot be made to disappear for real here, and
// unmounting tracefs would break every other tracer on the machine.
var openTracer = bpf.Open

// recording is the state of one Run.
type recording struct {
	o      *Options
	stderr io.Writer
	tr     *bpf.Tracer
	models *models
	child  *experiment.Child
	stats  liveStats
	// reserve is disk space held back for the final metadata, so that a
	// run that fills the disk still says what it captured.
	reserve string
	meta    *metaWriter
	// dec counts records act could not decode; only the goroutine that
	// reads the ring touches it.
	dec ingest.DecodeStats

	// mu guards the fields below and r.m, the metadata the writer
	// snapshots while the command runs.
	mu        sync.Mutex
	m         rundir.Meta
	warnings  []string
	searched  []string // files inspected for llama/ggml symbols
	layoutOK  bool
	layoutErr error
	// layoutCheck is touched only by the goroutine that reads the ring.
	layoutCheck layoutCheck
	mapsN       int
	libs        map[string]rundir.Library // build ids, read once per file
	// procs are the traced processes still alive as far as the events
	// tell: the child and what it forked.
	procs map[int]bool
	// With --probe ops: the calibrated cost of a hit, and per decode call
	// its op-probe hits and wall time (hitsAt: a call's hits at entry).
	opCost    bpf.UprobeCost
	opCostErr error
	hitsAt    map[uint32]uint64
	nodeOps   map[uint64]uint32 // weight-reading nodes seen → their op
	opNodes   map[uint64]bool   // nodes an op event was seen for
	tokenHits []uint64
	tokenNS   []uint64
}

func (r *recording) warn(s string) {
	r.mu.Lock()
	r.warnings = append(r.warnings, s)
	r.mu.Unlock()
	fmt.Fprintf(r.stderr, "iocorr: warning: %s\n", s)
}

// warned reports whether a warning already says s.
func (r *recording) warned(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.warnings {
		if strings.Contains(w, s) {
			return true
		}
	}
	return false
}

// update changes the metadata under the lock the writer takes.
func (r *recording) update(f func(m *rundir.Meta)) {
	r.mu.Lock()
	f(&r.m)
	r.mu.Unlock()
}

// Run records o.Argv into o.Dir. An error before the command started
// leaves Result.Ran false (and, once the directory exists, a meta.json
// saying why); an error of the recording itself (a full disk) comes with
// a Result that says what was captured.
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
	// Whatever happens from here, the run directory belongs to the person
	// who ran sudo (or --user), not to root.
	defer func() {
		if err := ChownRun(o.Dir, o.User); err != nil {
			fmt.Fprintf(o.Stderr, "iocorr: %v\n", err)
		}
	}()

	r := &recording{o: &o, stderr: o.Stderr, procs: map[int]bool{}, libs: map[string]rundir.Library{}}
	probeSet := "graph"
	if o.ProbeOps {
		probeSet = "ops"
	}
	if o.ProbeSched {
		probeSet += ",sched"
	}
	r.m = rundir.Meta{
		Version: o.Version, Command: o.Argv, Host: experiment.HostInfo(), ProbeSet: probeSet,
		Controls:  rundir.Controls{Cold: o.Cold, DropCaches: o.DropCaches, MemLimit: o.MemLimit},
		GoVersion: runtime.Version(), Lost: map[string]uint64{}, Counts: map[string]uint64{},
		Start: time.Now(),
	}
	r.meta = newMetaWriter(o.Dir, r.snapshot, func(err error) { fmt.Fprintf(r.stderr, "iocorr: %v\n", err) })
	// The metadata is written first, so that whatever happens later the
	// directory says what was attempted (Finished stays false until the
	// end).
	if err := r.meta.writeNow(); err != nil {
		return Result{}, err
	}
	r.reserve = reserveSpace(o.Dir)

	var err error
	if o.ProbeOps {
		// Before the command starts: the calibration's own hits must not
		// land in the traced command's time.
		r.opCost, r.opCostErr = bpf.MeasureUprobeCost(2000, 3)
		r.hitsAt, r.nodeOps, r.opNodes = map[uint32]uint64{}, map[uint64]uint32{}, map[uint64]bool{}
	}
	r.tr, err = openTracer(bpf.Options{ProbeOps: o.ProbeOps, ProbeSched: o.ProbeSched, RingBufBytes: o.RingBufBytes, SelfPID: os.Getpid()})
	if err != nil {
		if errors.Is(err, bpf.ErrPrivileges) {
			err = fmt.Errorf("%w (run as root)", err)
		} else if hint := tracefsHint(); hint != "" {
			err = fmt.Errorf("%w (%s)", err, hint)
		}
		r.finish(nil, err)
		return Result{}, fmt.Errorf("%w; `iocorr doctor` checks this machine", err)
	}
	var closeOnce sync.Once
	closeTracer := func() {
		closeOnce.Do(func() {
			if err := r.tr.Close(); err != nil {
				fmt.Fprintf(r.stderr, "iocorr: closing the tracer: %v\n", err)
			}
		})
	}
	defer closeTracer()

	r.models = newModels(r.warn, func(mf *rundir.ModelFile) error {
		if err := r.tr.AddFile(mf.Dev, mf.Ino); err != nil {
			return err
		}
		if mf.Block.DiskDev != 0 {
			return r.tr.AddDevice(mf.Block.DiskDev)
		}
		return nil
	})
	for _, p := range o.Models {
		if _, err := r.models.add(p); err != nil {
			r.finish(nil, err)
			return Result{}, fmt.Errorf("--model: %w", err)
		}
	}
	// Files on the command line are a guess: one that is not a usable
	// model is not a reason to stop.
	for _, p := range candidatesInArgs(o.Argv) {
		if _, err := r.models.add(p); err != nil {
			r.warn(err.Error())
		}
	}
	if o.DropCaches {
		if err := experiment.DropCaches(); err != nil {
			r.finish(nil, err)
			return Result{}, err
		}
	}

	sp, err := ingest.CreateSpool(filepath.Join(o.Dir, rundir.SpoolFile))
	if err != nil {
		r.finish(nil, err)
		return Result{}, err
	}

	child, err := experiment.StartHeld(o.Argv, o.User, o.Stdout, o.Stderr, r.tr)
	if err != nil {
		sp.Close()
		r.finish(nil, err)
		return Result{}, err
	}
	r.child = child
	r.procs[child.PID()] = true
	r.m.Child.PID = child.PID()
	if o.User != nil {
		r.m.Child.UID, r.m.Child.GID = int(o.User.UID), int(o.User.GID)
	}
	abort := func(err error) (Result, error) {
		child.Abort()
		sp.Close()
		r.finish(nil, err)
		return Result{}, err
	}
	var cg *experiment.Cgroup
	if o.MemLimit > 0 {
		cg, err = experiment.NewMemoryCgroup(experiment.CgroupName(child.PID()), o.MemLimit)
		if err != nil {
			return abort(err)
		}
		// Deferred, so that every way out (an error, Ctrl-C) removes it.
		defer func() {
			if err := cg.Remove(); err != nil {
				fmt.Fprintf(r.stderr, "iocorr: %v\n", err)
			}
		}()
		r.m.Controls.Cgroup, r.m.Controls.CgroupVer = cg.Path, cg.Version
		if err := cg.Add(child.PID()); err != nil {
			return abort(err)
		}
	}
	// The executable itself is mapped by execve, not by mmap, so the
	// kernel cannot stop the child for it: probe it (and --lib files) now.
	if exe, err := lookPath(o.Argv[0]); err == nil {
		r.attach(exe)
	}
	for _, l := range o.Libs {
		r.attach(l)
	}
	if o.Cold {
		if len(r.models.files()) == 0 {
			r.warn("--cold: no model file is known before the command starts, nothing was evicted (name it with --model)")
		}
		for i, mf := range r.models.files() {
			res, pages, err := experiment.Evict(mf.Path)
			if err != nil {
				return abort(err)
			}
			r.models.setResident(i, res)
			if res > 0 {
				r.warn(fmt.Sprintf("--cold: %d of %d pages of %s stayed in the page cache", res, pages, mf.Path))
			}
		}
	} else {
		for i, mf := range r.models.files() {
			res, _, err := experiment.Residency(mf.Path)
			if err != nil {
				r.warn(fmt.Sprintf("model %s: page-cache residency before the run is unknown: %v", mf.Path, err))
				continue
			}
			r.models.setResident(i, res)
		}
	}
	// Ctrl-C during the set-up (eviction of a large model takes a while)
	// means the command should not start at all.
	if ctx.Err() != nil {
		return abort(errors.New("interrupted before the command started"))
	}
	disk, err := experiment.DiskStats()
	if err != nil {
		r.warn(fmt.Sprintf("disk counters before the run are unknown: %v", err))
	}
	r.m.DiskBefore = disk
	r.m.MonoStartNS = experiment.MonotonicNS()
	r.m.Start = time.Now()
	// From here the drain goroutine adds to the metadata; every later
	// change goes through r.mu, and the writer keeps meta.json current.
	r.meta.start()
	r.meta.changed()

	drainCtx, stopDrain := context.WithCancel(context.Background())
	var counts ingest.Counts
	drainErr := make(chan error, 1)
	go func() { drainErr <- ingest.Drain(drainCtx, r.tr.RingBuf(), sp, &counts, r.act) }()

	stopProgress := r.stats.report(o.Progress, &counts, r.m.Start)
	stopForward := child.ForwardSignals()
	if err := child.Release(); err != nil {
		stopForward()
		stopProgress()
		stopDrain()
		<-drainErr
		r.meta.stop()
		return abort(err)
	}

	// The drain ends early only on a spool error (a full disk). The ring
	// must still be read then: the kernel stops a process that maps a new
	// executable and waits for user space to let it go.
	var derr error
	drained := false
	select {
	case <-child.Done():
	case derr = <-drainErr:
		drained = true
		r.warn(fmt.Sprintf("recording stopped early, the command ran on unrecorded: %v", derr))
		dctx, stopDiscard := context.WithCancel(context.Background())
		type discard struct {
			n   uint64
			err error
		}
		discarded := make(chan discard, 1)
		go func() {
			n, err := ingest.Discard(dctx, r.tr.RingBuf(), r.act)
			discarded <- discard{n, err}
		}()
		<-child.Done()
		stopDiscard()
		d := <-discarded
		if d.n > 0 {
			r.warn(fmt.Sprintf("%d events that arrived after the spool failed are not in the record", d.n))
		}
		if d.err != nil {
			r.warn(fmt.Sprintf("the ring buffer could not be read to its end after the spool failed: %v", d.err))
		}
	}
	sigs := stopForward()
	exit := child.Wait()
	monoEnd, end := experiment.MonotonicNS(), time.Now()
	// Right at the end stamp, as DiskBefore is right before the start
	// stamp: block completions stamped inside [start, end] are then what
	// the device's own counters saw in between.
	diskAfter, diskErr := experiment.DiskStats()
	r.residentEnd()
	// Page-cache runs still pending in the kernel, up to the residency
	// snapshot just taken, go to the ring before it is read to its end.
	if err := r.tr.FlushPageRuns(); err != nil {
		r.warn(err.Error() + ": the last page-cache adds and deletions of the run are missing")
	}
	stopDrain()
	if !drained {
		derr = <-drainErr
	}
	stopProgress()
	r.meta.stop()
	if cerr := sp.Close(); derr == nil {
		derr = cerr
	}

	r.m.MonoEndNS, r.m.End = monoEnd, end
	r.m.Child.ExitCode, r.m.Child.Signal = exit.Code, exit.Signal
	ru := exit.Rusage
	r.m.Child.MajFlt, r.m.Child.MinFlt = ru.Majflt, ru.Minflt
	r.m.Child.InBlock, r.m.Child.OutBlock, r.m.Child.MaxRSSKiB = ru.Inblock, ru.Oublock, ru.Maxrss
	r.m.Child.UserNS, r.m.Child.SystemNS = syscall.TimevalToNsec(ru.Utime), syscall.TimevalToNsec(ru.Stime)
	if r.m.DiskAfter, err = diskAfter, diskErr; err != nil {
		r.warn(fmt.Sprintf("disk counters after the run are unknown: %v", err))
	}
	if cg != nil {
		r.m.Controls.CgroupCounters = cg.Counters()
	}
	r.m.Counts = counts.Map()
	if r.dec.Short+r.dec.Unknown > 0 {
		r.warn(fmt.Sprintf("%d records too short for their type and %d of unknown type were not looked at while recording", r.dec.Short, r.dec.Unknown))
	}
	if sigs.Received > 0 {
		r.warn(fmt.Sprintf("the command was interrupted (%d signal(s) received, %d forwarded; the terminal delivered the rest itself)", sigs.Received, sigs.Forwarded))
	}
	if exit.Signal != "" {
		hint := ""
		if exit.Signal == "SIGKILL" && cg != nil {
			hint = fmt.Sprintf(" (the %s memory limit may be too small for the command itself: see cgroup_counters)", sizeText(o.MemLimit))
		}
		r.warn(fmt.Sprintf("the command was killed by %s%s", exit.Signal, hint))
	}
	r.finish(&exit, derr)
	// Nothing reads the ring from here on: detach before anything slow,
	// so that a process the command left behind is neither stopped for
	// uprobes nor slowed by probes.
	closeTracer()
	if r.continueStopped() > 0 {
		r.finishMeta()
	}
	res := Result{Meta: r.m, Stats: r.stats.snapshot(counts.Total()), Signals: sigs, Ran: true}
	if derr != nil {
		return res, fmt.Errorf("%w (the run directory holds what was captured)", derr)
	}
	return res, nil
}

// sizeText shows a byte count in the largest binary unit that divides it.
func sizeText(n int64) string {
	for _, u := range []struct {
		s     string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n>>u.shift > 0 && n&(1<<u.shift-1) == 0 {
			return fmt.Sprintf("%d%s", n>>u.shift, u.s)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// tracefsHint explains a tracepoint that could not attach when tracefs is
// not mounted (the default on some machines).
func tracefsHint() string {
	for _, d := range []string{"/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"} {
		if _, err := os.Stat(d); err == nil {
			return ""
		}
	}
	return "tracefs is not mounted: mount -t tracefs nodev /sys/kernel/tracing"
}

// cont sends SIGCONT to a process the kernel stopped for a uprobe attach.
// A failure leaves it stopped, so it is said and kept in the metadata;
// retrying cannot help. A process that is gone (ESRCH) is not stopped.
func (r *recording) cont(pid int, why string) {
	err := unix.Kill(pid, unix.SIGCONT)
	if err == nil || errors.Is(err, unix.ESRCH) {
		return
	}
	errno := 0
	var en unix.Errno
	if errors.As(err, &en) {
		errno = int(en)
	}
	r.warn(fmt.Sprintf("process %d, stopped %s, could not be continued and may still be stopped: %v (errno %d); `kill -CONT %d` releases it", pid, why, err, errno, pid))
}

// continueStopped sends SIGCONT to traced processes the kernel stopped
// for a uprobe attach whose mmap event nobody read (they outlived the
// command and mapped a file after the ring was last read), and says how
// many it found.
func (r *recording) continueStopped() int {
	r.mu.Lock()
	pids := make([]int, 0, len(r.procs))
	for pid := range r.procs {
		pids = append(pids, pid)
	}
	r.mu.Unlock()
	n := 0
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// The state follows the command name, which is in parentheses
		// and may itself contain spaces and parentheses.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) && b[i+2] == 'T' {
			r.cont(pid, "after the recording")
			r.warn(fmt.Sprintf("process %d was left stopped after the recording; it was continued", pid))
			n++
		}
	}
	return n
}

// snapshot is the metadata as far as it is known now: what the run set
// up, every model found so far, the probes and libraries attached, the
// layout and op names read from the target, the maps snapshots taken.
// finish and the crash-safe writer both use it.
func (r *recording) snapshot() rundir.Meta {
	var probes []bpf.Probe
	var lay ggml.Layout
	var opNames, opFuncs, opFiles, opIdle []string
	if r.tr != nil {
		probes = r.tr.Probes()
		opFiles, opIdle = r.tr.OpProbeFiles()
		lay = r.tr.Layout()
		opNames, _ = r.tr.OpNames()
		opFuncs = r.tr.OpFuncs()
	}
	var models []rundir.ModelFile
	if r.models != nil {
		models = r.models.files()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.m
	m.Maps = append([]rundir.MapsSnapshot(nil), r.m.Maps...)
	m.Warnings = append([]string(nil), r.warnings...)
	if r.models != nil {
		m.Models = models
	}
	if r.tr != nil {
		m.Probes, m.Libraries = nil, nil
		seenLib := map[string]bool{}
		for _, p := range probes {
			m.Probes = append(m.Probes, rundir.Probe{Kind: p.Kind, Target: p.Target, Symbol: p.Symbol, Error: p.Error})
			if (strings.HasPrefix(p.Kind, "uprobe") || p.Kind == "uretprobe") && p.Error == "" && !seenLib[p.Target] {
				seenLib[p.Target] = true
				lib, ok := r.libs[p.Target]
				if !ok {
					lib = libraryInfo(p.Target)
					r.libs[p.Target] = lib
				}
				m.Libraries = append(m.Libraries, lib)
			}
		}
		tensor, graph := lay.Map()
		m.Layout = &rundir.Layout{Source: lay.Source, Tensor: tensor, Graph: graph}
		if r.layoutOK {
			m.Layout.Source += " (validated)"
		}
		if r.layoutErr != nil {
			m.Layout.Invalid = r.layoutErr.Error()
		}
		m.OpNames, m.OpFuncs = opNames, opFuncs
		if r.o.ProbeOps {
			m.OpProbes = r.opProbes(opFiles, opIdle, opNames, opFuncs)
		}
	}
	return m
}

// opProbes sums up what --probe ops cost per token; r.mu is held.
func (r *recording) opProbes(files, idle, opNames, opFuncs []string) *rundir.OpProbes {
	op := &rundir.OpProbes{Files: files, Idle: idle, Tokens: len(r.tokenHits)}
	// The dispatcher runs for every node: no op lacks a probe point.
	dispatch := slices.Contains(opFuncs, ggml.SymDispatch)
	for node, v := range r.nodeOps {
		if int(v) >= len(opNames) || ggml.IsEmptyOp(opNames[v]) {
			continue
		}
		name := opNames[v]
		switch {
		case !dispatch && !slices.Contains(opFuncs, ggml.OpFunction(name)):
			if op.Unprobed == nil {
				op.Unprobed = map[string]int{}
			}
			op.Unprobed[name]++
		case !r.opNodes[node] && len(r.tokenHits) > 0:
			if op.Fused == nil {
				op.Fused = map[string]int{}
			}
			op.Fused[name]++
		}
	}
	if r.opCostErr != nil {
		op.CalibrationNA = "the cost of a uprobe hit could not be measured: " + r.opCostErr.Error()
	} else {
		op.PerHitNS = r.opCost.PerHit.Nanoseconds()
	}
	var hits, ns float64
	for i, h := range r.tokenHits {
		hits += float64(h)
		ns += float64(r.tokenNS[i])
		op.HitsPerTokenMax = max(op.HitsPerTokenMax, h)
	}
	if n := float64(len(r.tokenHits)); n > 0 {
		op.HitsPerTokenMean, op.TokenNSMean = hits/n, ns/n
	}
	if ns > 0 && op.PerHitNS > 0 {
		op.OverheadRatio = hits * float64(op.PerHitNS) / ns
	}
	if ns > 0 {
		for i, c := range bpf.BareMetalUprobeCost {
			op.BareMetalOverheadRatio[i] = hits * float64(c.Nanoseconds()) / ns
		}
	}
	return op
}

// residentEnd takes each model's page-cache map with mincore once the
// command has ended, while events are still drained: what `iocorr stats`
// checks the residency replayed from page-cache events against.
func (r *recording) residentEnd() {
	for i, mf := range r.models.files() {
		ranges, n, err := experiment.ResidentRanges(mf.Path)
		if err != nil {
			r.warn(fmt.Sprintf("model %s: page-cache residency at the end is unknown: %v", mf.Path, err))
			continue
		}
		r.models.setResidentEnd(i, &rundir.PageMap{Resident: n, Ranges: ranges})
	}
}

// finish completes and writes the metadata; derr is the recording error.
// It also runs when the tracer never opened (r.tr is nil).
func (r *recording) finish(exit *experiment.Exit, derr error) {
	if derr != nil && !r.warned(derr.Error()) {
		r.warn(fmt.Sprintf("recording failed: %v", derr))
	}
	var nlost uint64
	if r.tr != nil {
		lost, err := r.tr.Lost()
		if err != nil {
			r.warn(err.Error())
		}
		if lost != nil {
			r.m.Lost = lost
		}
		for _, n := range lost {
			nlost += n
		}
		if nlost > 0 {
			r.warn(fmt.Sprintf("%d events were lost (the ring buffer was full); raise --ringbuf-size", nlost))
		}
		// Requests issued while the child ran whose completion never
		// reached BPF (seen on this VM for a few completions run in
		// softirq) are not in the record: say how many instead of losing
		// them silently.
		if n, err := r.tr.PendingBlockRequests(); err == nil && n > 0 {
			r.m.BlockIncomplete = uint64(n)
			r.warn(fmt.Sprintf("%d block requests were seen issued but never completed; they are not in the record", n))
		}
		if exit != nil && !r.hasUserProbes() {
			r.warn(fmt.Sprintf("no llama.cpp symbols (%s) found, kernel events only; searched: %s",
				strings.Join(ggml.ProbeSymbols, ", "), strings.Join(r.searched, ", ")))
		}
		// Graphs whose nodes could not be read at all (a wrong node
		// count or array offset) validate nothing: the layout is as
		// unproven as one that failed, and the expert ids were read with it.
		if g := r.stats.graphs.Load(); g > 0 && r.layoutCheck.nodes == 0 && r.layoutErr == nil && len(r.models.files()) > 0 {
			err := fmt.Errorf("%d graphs were computed but none of their nodes could be read", g)
			r.mu.Lock()
			r.layoutErr = err
			r.mu.Unlock()
			r.warn(layoutFailed(r.tr.Layout(), err))
		}
		if exit != nil {
			r.mu.Lock()
			searched := append([]string(nil), r.searched...)
			r.mu.Unlock()
			for _, w := range missingCapabilities(r.tr.Probes(), searched, r.o.ProbeOps, r.hasExperts()) {
				r.warn(w)
			}

		}
	}

	r.mu.Lock()
	if exit == nil && len(r.warnings) == 0 {
		r.warnings = []string{"the command did not run"}
	}
	r.mu.Unlock()
	r.m.Complete = exit != nil && derr == nil && nlost == 0 && exit.Signal == ""
	r.m.Finished = true
	// The reserve goes first: on a full disk it is what meta.json fits in.
	if r.reserve != "" {
		os.Remove(r.reserve)
		r.reserve = ""
	}
	r.finishMeta()
}

// finishMeta writes the final metadata and keeps it as r.m.
func (r *recording) finishMeta() {
	r.m = r.snapshot()
	if err := rundir.WriteMeta(r.o.Dir, &r.m); err != nil {
		fmt.Fprintf(r.stderr, "iocorr: %v\n", err)
	}
}

// hasExperts says whether a traced model has expert tensors (MoE).
func (r *recording) hasExperts() bool {
	if r.models == nil {
		return false
	}
	for _, mf := range r.models.files() {
		for _, t := range mf.Tensors {
			if t.Experts > 0 {
				return true
			}
		}
	}
	return false
}

func (r *recording) hasUserProbes() bool {
	for _, p := range r.tr.Probes() {
		if p.Symbol == ggml.SymDecode && p.Error == "" {
			return true
		}
	}
	return false
}

// attach puts uprobes on a file if it has llama/ggml symbols. What was
// probed (and the layout and op names read from the file) goes to
// meta.json at once.
func (r *recording) attach(path string) {
	r.mu.Lock()
	r.searched = append(r.searched, path)
	r.mu.Unlock()
	if _, err := r.tr.AttachUser(path); err != nil {
		r.warn(err.Error())
	}
	r.meta.changed()
}

// act runs on the drain goroutine for every record.
func (r *recording) act(typ uint16, rec []byte) {
	d, ok := ingest.Decode(rec, &r.dec)
	if !ok {
		return
	}
	r.stats.observe(d, r.models)
	switch {
	case d.Mmap() != nil:
		e := d.Mmap()
		pid := int(e.Hdr.Tgid)
		path := mappedPath(pid, e.Start, e.End)
		if e.Stopped == 1 {
			// The kernel stopped the process before it could run code
			// of this file: probe it, then let it go — always.
			if path != "" {
				r.attach(path)
			}
			r.cont(pid, "for a uprobe attach")
			return
		}
		isModel, isNew := r.models.mapped(e.Dev, e.Ino, path)
		if !isModel {
			return
		}
		if isNew {
			// Reading the file in (MAP_POPULATE, the header read) came
			// before this mmap returned, and the kernel kept page-cache
			// events only of files it knew.
			r.warn(fmt.Sprintf("model %s became known only when it was mapped: its page-cache events before that are not in the record (name it with --model)", path))
			r.meta.changed()
		}
		r.mu.Lock()
		r.mapsN++
		n := r.mapsN
		r.mu.Unlock()
		snap, err := experiment.SnapshotMaps(r.o.Dir, n, pid, e.Hdr.Ts)
		if err != nil {
			r.warn(err.Error())
			return
		}
		r.update(func(m *rundir.Meta) { m.Maps = append(m.Maps, snap) })
		r.meta.changed()
	case d.Task() != nil:
		e := d.Task()
		r.mu.Lock()
		switch e.Kind {
		case uint32(bpf.IocorrTaskKindTASKEV_FORK):
			r.procs[int(e.Child)] = true
		case uint32(bpf.IocorrTaskKindTASKEV_EXIT):
			delete(r.procs, int(e.Hdr.Tgid))
		}
		r.mu.Unlock()
	case d.Graph() != nil:
		e := d.Graph()
		if !r.o.ProbeOps {
			return
		}
		// The first graph of a file: its op probes go on now, while the
		// kernel holds the process stopped (if it could) before the graph runs.
		attached, err := r.tr.AttachPendingOps(e.File)
		if err != nil {
			r.warn(err.Error())
		}
		if e.Stopped == 1 {
			r.cont(int(e.Hdr.Tgid), "for the op-probe attach")
		} else if attached {
			r.warn("the process could not be stopped for the op-probe attach: ops of its first graph may be missing")
		}
		if attached {
			r.meta.changed()
		}
	case d.Decode() != nil:
		e := d.Decode()
		if !r.o.ProbeOps {
			return
		}
		r.mu.Lock()
		if e.Hdr.Type == uint16(bpf.IocorrEventTypeEV_DECODE_BEGIN) {
			r.hitsAt[e.Hdr.Tid] = e.OpHits
		} else if at, ok := r.hitsAt[e.Hdr.Tid]; ok && e.BeginTs != 0 && e.Hdr.Ts >= e.BeginTs {
			delete(r.hitsAt, e.Hdr.Tid)
			r.tokenHits = append(r.tokenHits, e.OpHits-at)
			r.tokenNS = append(r.tokenNS, e.Hdr.Ts-e.BeginTs)
		}
		r.mu.Unlock()
	case d.Op() != nil:
		r.mu.Lock()
		r.opNodes[d.Op().Node] = true
		r.mu.Unlock()
	case d.Node() != nil:
		if r.o.ProbeOps {
			r.mu.Lock()
			r.nodeOps[d.Node().Node] = d.Node().Op
			r.mu.Unlock()
		}
		if r.layoutErr != nil {
			return
		}
		names, _ := r.tr.OpNames()
		err := ggml.ValidateNode(nodeOf(d.Node()), len(names), r.layoutCheck.weight(r.models))
		r.layoutCheck.nodes++
		if err == nil {
			if !r.layoutOK {
				r.mu.Lock()
				r.layoutOK = true
				r.mu.Unlock()
				r.meta.changed()
			}
			return
		}
		r.mu.Lock()
		r.layoutErr, r.layoutOK = err, false
		r.mu.Unlock()
		if derr := r.tr.DisableLayoutProbes(); derr != nil {
			r.warn(fmt.Sprintf("detaching the probes that read ggml structs: %v", derr))
		}
		r.warn(layoutFailed(r.tr.Layout(), err))
		r.meta.changed()
	}
}
