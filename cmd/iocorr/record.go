package main

import (
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/experiment"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "record",
		summary: "run a command and trace which tensors cause its disk I/O",
		usage:   "[-o DIR] [flags] -- CMD [ARGS...]",
		flags:   recordFlags,
	})
}

type recordOpts struct {
	out        string
	force      bool
	probe      string
	libs       []string
	models     []string
	cold       bool
	dropCaches bool
	memLimit   string
	user       string
	noIngest   bool
	ringbuf    string
}

func recordFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := &recordOpts{}
	fs.StringVarP(&o.out, "output", "o", rundir.Default, "run directory to write")
	fs.BoolVarP(&o.force, "force", "f", false, "overwrite an existing run directory")
	fs.StringVar(&o.probe, "probe", "graph", "user-space probes: graph (one hit per graph) or ops (also every op, costlier)")
	fs.StringArrayVar(&o.libs, "lib", nil, "also attach uprobes to this ELF file (repeatable)")
	fs.StringArrayVar(&o.models, "model", nil, "a model file to trace (repeatable; default: every GGUF file the command maps)")
	fs.BoolVar(&o.cold, "cold", false, "evict the model files from the page cache before the command starts")
	fs.BoolVar(&o.dropCaches, "drop-caches", false, "drop the whole system's page cache before the command starts")
	fs.StringVar(&o.memLimit, "mem-limit", "", "run the command in a memory cgroup with this limit (e.g. 256MiB)")
	fs.StringVar(&o.user, "user", "", "run the command as this user (default: the invoking user under sudo)")
	fs.BoolVar(&o.noIngest, "no-ingest", false, "do not build the query store at the end (run iocorr ingest DIR later)")
	fs.StringVar(&o.ringbuf, "ringbuf-size", "64MiB", "BPF ring buffer size (a power of two)")
	return func(ctx context.Context, args []string) error { return runRecord(ctx, o, args) }
}

// openTracer is bpf.Open. A test replaces it to see a tracer that cannot
// attach: a tracepoint cannot be made to disappear for real here, and
// unmounting tracefs would break every other tracer on the machine.
var openTracer = bpf.Open

// recording is the state of one `iocorr record`.
type recording struct {
	o      *recordOpts
	dir    string
	meta   rundir.Meta
	tr     *bpf.Tracer
	models *models
	child  *experiment.Child
	stats  liveStats
	// reserve is disk space held back for the final metadata, so that a
	// run that fills the disk still says what it captured.
	reserve string

	mu        sync.Mutex
	warnings  []string
	searched  []string // files inspected for llama/ggml symbols
	layoutOK  bool
	layoutErr error
	mapsN     int
	// procs are the traced processes still alive as far as the events
	// tell: the child and what it forked.
	procs map[int]bool
}

func (r *recording) warn(s string) {
	r.mu.Lock()
	r.warnings = append(r.warnings, s)
	r.mu.Unlock()
	fmt.Fprintf(stderr, "iocorr: warning: %s\n", s)
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

// lockedWriter serializes writes: iocorr's own messages come from the
// drain goroutine while exec.Cmd copies the command's output into the
// same writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// shareable makes w safe for iocorr and the command to write at once. A
// file is left as it is: the command gets the descriptor itself (its
// stderr stays a terminal), and the kernel orders the writes.
func shareable(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}

func runRecord(ctx context.Context, o *recordOpts, argv []string) error {
	stdout, stderr = shareable(stdout), shareable(stderr)
	if len(argv) == 0 {
		return usagef("record: no command given (iocorr record [flags] -- CMD ARGS...)")
	}
	if o.probe != "graph" && o.probe != "ops" {
		return usagef("record: --probe must be graph or ops, not %q", o.probe)
	}
	ringBytes, err := parseSize(o.ringbuf)
	if err != nil {
		return usagef("record: --ringbuf-size: %v", err)
	}
	if ringBytes < int64(os.Getpagesize()) || ringBytes&(ringBytes-1) != 0 || ringBytes > 1<<30 {
		return usagef("record: --ringbuf-size %s: want a power of two from 4KiB to 1GiB", o.ringbuf)
	}
	var memLimit int64
	if o.memLimit != "" {
		if memLimit, err = parseSize(o.memLimit); err != nil {
			return usagef("record: --mem-limit: %v", err)
		}
		if memLimit < 1<<20 {
			return usagef("record: --mem-limit %s is below 1MiB: the command could not even start", o.memLimit)
		}
	}
	if _, err := exec.LookPath(argv[0]); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	for _, p := range append(append([]string(nil), o.models...), o.libs...) {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("record: %w", err)
		}
	}
	var user *experiment.User
	if o.user != "" {
		if os.Geteuid() != 0 {
			return usagef("record: --user needs root")
		}
		if user, err = experiment.LookupUser(o.user); err != nil {
			return fmt.Errorf("record: %w", err)
		}
	} else if user, err = experiment.SudoUser(); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if err := prepareRunDir(o.out, o.force); err != nil {
		return err
	}
	// Whatever happens from here, the run directory belongs to the person
	// who ran sudo (or --user), not to root.
	if user != nil {
		defer chownTree(o.out, int(user.UID), int(user.GID))
	}

	r := &recording{o: o, dir: o.out, procs: map[int]bool{}}
	r.meta = rundir.Meta{
		Version: version, Command: argv, Host: experiment.HostInfo(), ProbeSet: o.probe,
		Controls:  rundir.Controls{Cold: o.cold, DropCaches: o.dropCaches, MemLimit: memLimit},
		GoVersion: runtime.Version(), Lost: map[string]uint64{}, Counts: map[string]uint64{},
	}
	// The metadata is written first, so that whatever happens later the
	// directory says what was attempted.
	r.meta.Start = time.Now()
	r.meta.Warnings = []string{"recording did not finish"}
	if err := rundir.WriteMeta(o.out, &r.meta); err != nil {
		return fmt.Errorf("record: %w", err)
	}
	r.meta.Warnings = nil
	r.reserve = reserveSpace(o.out)

	r.tr, err = openTracer(bpf.Options{ProbeOps: o.probe == "ops", RingBufBytes: int(ringBytes), SelfPID: os.Getpid()})
	if err != nil {
		if errors.Is(err, bpf.ErrPrivileges) {
			err = fmt.Errorf("%w (run as root)", err)
		} else if hint := tracefsHint(); hint != "" {
			err = fmt.Errorf("%w (%s)", err, hint)
		}
		r.finish(nil, err)
		return fmt.Errorf("record: %w; `iocorr doctor` checks this machine", err)
	}
	var closeOnce sync.Once
	closeTracer := func() {
		closeOnce.Do(func() {
			if err := r.tr.Close(); err != nil {
				fmt.Fprintf(stderr, "iocorr: closing the tracer: %v\n", err)
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
	for _, p := range o.models {
		if _, err := r.models.add(p); err != nil {
			r.finish(nil, err)
			return fmt.Errorf("record: --model: %w", err)
		}
	}
	// Files on the command line are a guess: one that is not a usable
	// model is not a reason to stop.
	for _, p := range candidatesInArgs(argv) {
		if _, err := r.models.add(p); err != nil {
			r.warn(err.Error())
		}
	}
	if o.dropCaches {
		if err := experiment.DropCaches(); err != nil {
			r.finish(nil, err)
			return fmt.Errorf("record: %w", err)
		}
	}

	sp, err := ingest.CreateSpool(filepath.Join(o.out, rundir.SpoolFile))
	if err != nil {
		r.finish(nil, err)
		return fmt.Errorf("record: %w", err)
	}

	child, err := experiment.StartHeld(argv, user, stdout, stderr)
	if err != nil {
		sp.Close()
		r.finish(nil, err)
		return fmt.Errorf("record: %w", err)
	}
	r.child = child
	r.procs[child.PID()] = true
	r.meta.Child.PID = child.PID()
	if user != nil {
		r.meta.Child.UID, r.meta.Child.GID = int(user.UID), int(user.GID)
	}
	abort := func(err error) error {
		child.Abort()
		sp.Close()
		r.finish(nil, err)
		return fmt.Errorf("record: %w", err)
	}
	if err := r.tr.TracePID(child.PID()); err != nil {
		return abort(err)
	}
	var cg *experiment.Cgroup
	if memLimit > 0 {
		cg, err = experiment.NewMemoryCgroup(experiment.CgroupName(child.PID()), memLimit)
		if err != nil {
			return abort(err)
		}
		// Deferred, so that every way out (an error, Ctrl-C) removes it.
		defer func() {
			if err := cg.Remove(); err != nil {
				fmt.Fprintf(stderr, "iocorr: %v\n", err)
			}
		}()
		r.meta.Controls.Cgroup, r.meta.Controls.CgroupVer = cg.Path, cg.Version
		if err := cg.Add(child.PID()); err != nil {
			return abort(err)
		}
	}
	// The executable itself is mapped by execve, not by mmap, so the
	// kernel cannot stop the child for it: probe it (and --lib files) now.
	if exe, err := lookPath(argv[0]); err == nil {
		r.attach(exe)
	}
	for _, l := range o.libs {
		if _, err := os.Stat(l); err != nil {
			return abort(fmt.Errorf("--lib %s: %w", l, err))
		}
		r.attach(l)
	}
	if o.cold {
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
			if res, _, err := experiment.Residency(mf.Path); err == nil {
				r.models.setResident(i, res)
			}
		}
	}
	// Ctrl-C during the set-up (eviction of a large model takes a while)
	// means the command should not start at all.
	if ctx.Err() != nil {
		return abort(errors.New("interrupted before the command started"))
	}
	r.meta.DiskBefore, _ = experiment.DiskStats()
	r.meta.MonoStartNS = experiment.MonotonicNS()
	r.meta.Start = time.Now()

	drainCtx, stopDrain := context.WithCancel(context.Background())
	var counts ingest.Counts
	drainErr := make(chan error, 1)
	go func() { drainErr <- ingest.Drain(drainCtx, r.tr.RingBuf(), sp, &counts, r.act) }()

	stopStatus := r.stats.start(stderr, &counts, r.meta.Start)
	stopForward := child.ForwardSignals()
	if err := child.Release(); err != nil {
		stopForward()
		stopStatus()
		stopDrain()
		<-drainErr
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
		discarded := make(chan uint64, 1)
		go func() {
			n, _ := ingest.Discard(dctx, r.tr.RingBuf(), r.act)
			discarded <- n
		}()
		<-child.Done()
		stopDiscard()
		if n := <-discarded; n > 0 {
			r.warn(fmt.Sprintf("%d events that arrived after the spool failed are not in the record", n))
		}
	}
	sigs := stopForward()
	exit := child.Wait()
	r.meta.MonoEndNS = experiment.MonotonicNS()
	r.meta.End = time.Now()
	stopDrain()
	if !drained {
		derr = <-drainErr
	}
	stopStatus()
	if cerr := sp.Close(); derr == nil {
		derr = cerr
	}

	r.meta.Child.ExitCode, r.meta.Child.Signal = exit.Code, exit.Signal
	ru := exit.Rusage
	r.meta.Child.MajFlt, r.meta.Child.MinFlt = ru.Majflt, ru.Minflt
	r.meta.Child.InBlock, r.meta.Child.OutBlock, r.meta.Child.MaxRSSKiB = ru.Inblock, ru.Oublock, ru.Maxrss
	r.meta.Child.UserNS, r.meta.Child.SystemNS = syscall.TimevalToNsec(ru.Utime), syscall.TimevalToNsec(ru.Stime)
	r.meta.DiskAfter, _ = experiment.DiskStats()
	if cg != nil {
		r.meta.Controls.CgroupCounters = cg.Counters()
	}
	r.meta.Counts = counts.Map()
	if sigs.Received > 0 {
		r.warn(fmt.Sprintf("the command was interrupted (%d signal(s) received, %d forwarded; the terminal delivered the rest itself)", sigs.Received, sigs.Forwarded))
	}
	if exit.Signal != "" {
		hint := ""
		if exit.Signal == "SIGKILL" && cg != nil {
			hint = fmt.Sprintf(" (the %s memory limit may be too small for the command itself: see cgroup_counters)", o.memLimit)
		}
		r.warn(fmt.Sprintf("the command was killed by %s%s", exit.Signal, hint))
	}
	r.finish(&exit, derr)
	// Nothing reads the ring from here on: detach before anything slow,
	// so that a process the command left behind is neither stopped for
	// uprobes nor slowed by probes while the store is built.
	closeTracer()
	if r.continueStopped() > 0 {
		r.mu.Lock()
		r.meta.Warnings = append([]string(nil), r.warnings...)
		r.mu.Unlock()
		if err := rundir.WriteMeta(r.dir, &r.meta); err != nil {
			fmt.Fprintf(stderr, "iocorr: %v\n", err)
		}
	}
	r.printSummary(stderr, &counts)

	if derr != nil {
		return fmt.Errorf("record: %w (the run directory holds what was captured)", derr)
	}
	if !o.noIngest {
		// Signals that reached the command were for the command: only
		// those that arrive from now on stop the build.
		base := ctx
		if sigs.Received > 0 {
			base = context.WithoutCancel(ctx)
		}
		bctx, bstop := signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM)
		err := buildStore(bctx, o.out)
		bstop()
		if err != nil {
			return fmt.Errorf("record: %w", err)
		}
	}
	if exit.Code != 0 {
		return exitError{exit.Code}
	}
	return nil
}

// reserveSpace holds a few MiB in the run directory for the final
// metadata: when the spool fills the disk, meta.json must still fit.
// It takes what it can on a small disk, and nothing on a full one.
func reserveSpace(dir string) string {
	p := filepath.Join(dir, ".meta-reserve")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return ""
	}
	defer f.Close()
	for size := int64(8 << 20); size >= 16<<10; size /= 2 {
		if unix.Fallocate(int(f.Fd()), 0, 0, size) == nil {
			return p
		}
	}
	os.Remove(p)
	return ""
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
			unix.Kill(pid, unix.SIGCONT)
			r.warn(fmt.Sprintf("process %d was left stopped after the recording; it was continued", pid))
			n++
		}
	}
	return n
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
			r.meta.Lost = lost
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
			r.meta.BlockIncomplete = uint64(n)
			r.warn(fmt.Sprintf("%d block requests were seen issued but never completed; they are not in the record", n))
		}
		r.meta.Probes = nil
		for _, p := range r.tr.Probes() {
			r.meta.Probes = append(r.meta.Probes, rundir.Probe{Kind: p.Kind, Target: p.Target, Symbol: p.Symbol, Error: p.Error})
		}
		r.meta.Libraries = nil
		seenLib := map[string]bool{}
		for _, p := range r.meta.Probes {
			if strings.HasPrefix(p.Kind, "uprobe") || p.Kind == "uretprobe" {
				if !seenLib[p.Target] && p.Error == "" {
					seenLib[p.Target] = true
					r.meta.Libraries = append(r.meta.Libraries, libraryInfo(p.Target))
				}
			}
		}
		lay := r.tr.Layout()
		tensor, graph := lay.Map()
		r.meta.Layout = &rundir.Layout{Source: lay.Source, Tensor: tensor, Graph: graph}
		if r.layoutOK {
			r.meta.Layout.Source += " (validated)"
		}
		r.meta.OpNames, _ = r.tr.OpNames()
		r.meta.OpFuncs = r.tr.OpFuncs()
		if exit != nil && !r.hasUserProbes() {
			r.warn(fmt.Sprintf("no llama.cpp symbols (%s) found, kernel events only; searched: %s",
				strings.Join(bpf.ProbeSymbols, ", "), strings.Join(r.searched, ", ")))
		}
	}
	if r.models != nil {
		r.meta.Models = r.models.files()
	}
	if r.layoutErr != nil {
		r.warn(fmt.Sprintf("ggml struct layout does not match the target (%v): graph nodes are not trustworthy", r.layoutErr))
	}
	r.mu.Lock()
	r.meta.Warnings = append([]string(nil), r.warnings...)
	r.mu.Unlock()
	if exit == nil && len(r.meta.Warnings) == 0 {
		r.meta.Warnings = []string{"the command did not run"}
	}
	r.meta.Complete = exit != nil && derr == nil && nlost == 0 && exit.Signal == ""
	// The reserve goes first: on a full disk it is what meta.json fits in.
	if r.reserve != "" {
		os.Remove(r.reserve)
		r.reserve = ""
	}
	if err := rundir.WriteMeta(r.dir, &r.meta); err != nil {
		fmt.Fprintf(stderr, "iocorr: %v\n", err)
	}
}

func (r *recording) hasUserProbes() bool {
	for _, p := range r.tr.Probes() {
		if p.Symbol == bpf.SymDecode && p.Error == "" {
			return true
		}
	}
	return false
}

// attach puts uprobes on a file if it has llama/ggml symbols.
func (r *recording) attach(path string) {
	r.mu.Lock()
	r.searched = append(r.searched, path)
	r.mu.Unlock()
	if _, err := r.tr.AttachUser(path); err != nil {
		r.warn(err.Error())
	}
}

// act runs on the drain goroutine for every record.
func (r *recording) act(typ uint16, rec []byte) {
	r.stats.observe(typ, rec, r)
	switch uint32(typ) {
	case uint32(bpf.IocorrEventTypeEV_MMAP):
		if len(rec) < int(unsafe.Sizeof(bpf.IocorrMmapEvent{})) {
			return
		}
		e := (*bpf.IocorrMmapEvent)(unsafe.Pointer(&rec[0]))
		pid := int(e.Hdr.Tgid)
		path := mappedPath(pid, e.Start, e.End)
		if e.Stopped == 1 {
			// The kernel stopped the process before it could run code
			// of this file: probe it, then let it go — always.
			if path != "" {
				r.attach(path)
			}
			unix.Kill(pid, unix.SIGCONT)
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
		}
		r.mapsN++
		snap, err := experiment.SnapshotMaps(r.dir, r.mapsN, pid, e.Hdr.Ts)
		if err != nil {
			r.warn(err.Error())
			return
		}
		r.mu.Lock()
		r.meta.Maps = append(r.meta.Maps, snap)
		r.mu.Unlock()
	case uint32(bpf.IocorrEventTypeEV_TASK):
		if len(rec) < int(unsafe.Sizeof(bpf.IocorrTaskEvent{})) {
			return
		}
		e := (*bpf.IocorrTaskEvent)(unsafe.Pointer(&rec[0]))
		r.mu.Lock()
		switch e.Kind {
		case uint32(bpf.IocorrTaskKindTASKEV_FORK):
			r.procs[int(e.Child)] = true
		case uint32(bpf.IocorrTaskKindTASKEV_EXIT):
			delete(r.procs, int(e.Hdr.Tgid))
		}
		r.mu.Unlock()
	case uint32(bpf.IocorrEventTypeEV_NODE):
		if r.layoutOK || r.layoutErr != nil || len(rec) < int(unsafe.Sizeof(bpf.IocorrNodeEvent{})) {
			return
		}
		e := (*bpf.IocorrNodeEvent)(unsafe.Pointer(&rec[0]))
		names, _ := r.tr.OpNames()
		if err := bpf.ValidateNode(e, len(names)); err != nil {
			r.layoutErr = err
		} else {
			r.layoutOK = true
		}
	}
}

// prepareRunDir creates the run directory, refusing to overwrite one
// unless forced — and never something that is not a run directory.
func prepareRunDir(dir string, force bool) error {
	if _, err := os.Stat(dir); err == nil {
		if !force {
			return fmt.Errorf("record: %s exists (use -f to overwrite it)", dir)
		}
		if _, err := os.Stat(filepath.Join(dir, rundir.MetaFile)); err != nil {
			if entries, _ := os.ReadDir(dir); len(entries) > 0 {
				return fmt.Errorf("record: %s exists and is not a run directory; not overwriting it", dir)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			return fmt.Errorf("record: removing %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("record: creating %s: %w", dir, err)
	}
	return nil
}

func chownTree(dir string, uid, gid int) {
	filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err == nil {
			os.Lchown(p, uid, gid)
		}
		return nil
	})
}

func lookPath(name string) (string, error) {
	if strings.Contains(name, "/") {
		return filepath.Abs(name)
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in PATH", name)
}

// libraryInfo identifies a probed library by its GNU build id.
func libraryInfo(path string) rundir.Library {
	lib := rundir.Library{Path: path}
	if st, err := os.Stat(path); err == nil {
		lib.Size = st.Size()
	}
	f, err := elf.Open(path)
	if err != nil {
		return lib
	}
	defer f.Close()
	if s := f.Section(".note.gnu.build-id"); s != nil {
		if b, err := s.Data(); err == nil && len(b) > 16 {
			// Elf_Nhdr (namesz, descsz, type), "GNU\0", then the id.
			namesz := binary.LittleEndian.Uint32(b[0:])
			descsz := binary.LittleEndian.Uint32(b[4:])
			off := 12 + (int(namesz)+3)&^3
			if off+int(descsz) <= len(b) {
				lib.BuildID = hex.EncodeToString(b[off : off+int(descsz)])
			}
		}
	}
	return lib
}
