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
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/procmaps"
	"github.com/iocorr/iocorr/prefetch"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// Options are everything a recording needs, as `iocorr record` flags give
// them.
type Options struct {
	Dir   string   // the run directory to write
	Force bool     // replace an existing run directory
	Argv  []string // the command
	// PID attaches to a running process instead of launching Argv (with
	// its threads and the children it starts from then on), for Duration
	// or until ctx ends or it exits.
	PID      int
	Duration time.Duration
	// Probes are the probe sets (--probe).
	Probes rundir.ProbeSet
	Libs   []string // further ELF files to probe
	Models []string // model files to trace from the start
	// ExactSnapshots stops each traced process at every token's start
	// until the recorder has taken its residency snapshot (residency.go):
	// the snapshot is the page cache at the start, the run pays the pause.
	ExactSnapshots bool

	// Cold evicts the known model files from the page cache before the
	// command starts; DropCaches drops the whole page cache.
	Cold, DropCaches bool
	MemLimit         int64 // bytes of a memory cgroup for the command; 0: none
	// Pin is a pin plan file (iocorr plan): its ranges are read and
	// locked inside the command's memory cgroup before it starts and held
	// to its end (package pin). It needs MemLimit.
	Pin string
	// Prefetch runs the prefetcher beside the command (package prefetch):
	// the router's picks bring their experts' slices into the page cache
	// from a helper in the command's memory cgroup. It needs a launched
	// command.
	Prefetch *prefetch.Config
	// PrefetchOnly is `iocorr prefetch`'s run: only the hooks the
	// prefetcher acts on (bpf.Options.PrefetchOnly); it needs Prefetch.
	PrefetchOnly bool
	// User runs the command as someone else and hands them the run
	// directory; nil keeps the recorder's identity.
	User *proc.User
	// RingBufBytes sizes the BPF ring buffer; 0 is DefaultRingBufBytes.
	RingBufBytes int
	Version      string // iocorr's version, for meta.json

	// Stdout and Stderr receive the command's output; Stderr also gets
	// the recorder's warnings. Nil means os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Progress, when set, is called every ProgressInterval while the
	// command runs, and once more with Done set when it has ended.
	Progress func(Progress)

	// NoIngest leaves the store unbuilt (Record): `iocorr ingest DIR`
	// builds it later.
	NoIngest bool
	// Recorded, when set, is called by Record once the command has run
	// and its recording ended, before the ingest: a summary of the
	// recording need not wait for the store.
	Recorded func(*Result)
}

// DefaultRingBufBytes is the ring buffer of a recording whose
// Options.RingBufBytes is 0: the tracer's own default.
const DefaultRingBufBytes = bpf.DefaultRingBufBytes

// ProgressInterval is how often Options.Progress is called.
const ProgressInterval = 500 * time.Millisecond

// Result is what became of a recording that started the command.
type Result struct {
	Meta rundir.Meta // as written to meta.json
	// Stats are the figures counted live from the records.
	Stats Stats
	// Signals are the terminating signals the recorder received while the
	// command ran (they were for the command).
	Signals launch.Signals
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
	if o.PID != 0 {
		if len(o.Argv) > 0 {
			return optionf("a command and -p: give one or the other")
		}
		if o.MemLimit != 0 {
			return optionf("--mem-limit applies to a launched command, not to -p")
		}
		if err := unix.Kill(o.PID, 0); err != nil {
			return fmt.Errorf("process %d: %w", o.PID, err)
		}
	} else if len(o.Argv) == 0 {
		return optionf("no command given (iocorr record [flags] -- CMD ARGS... or -p PID)")
	}
	if o.Duration < 0 || (o.Duration > 0 && o.PID == 0) {
		return optionf("--duration needs -p and a positive length")
	}
	if o.Dir == "" {
		return optionf("no run directory given")
	}
	if n := o.RingBufBytes; n != 0 && (n < os.Getpagesize() || n&(n-1) != 0 || n > 1<<30) {
		return optionf("ring buffer size %d: want a power of two from 4KiB to 1GiB", n)
	}
	if o.Pin != "" && (o.MemLimit <= 0 || o.PID != 0) {
		return optionf("--pin needs --mem-limit and a launched command: the plan is locked in the command's memory cgroup")
	}
	if o.Prefetch != nil && o.PID != 0 {
		return optionf("--prefetch needs a launched command: its helper runs in the command's memory cgroup")
	}
	if o.PrefetchOnly && o.Prefetch == nil {
		return optionf("a prefetch-only run without the prefetcher")
	}
	if o.Prefetch != nil && o.Prefetch.Window < 0 {
		return optionf("--window %d: want a positive size", o.Prefetch.Window)
	}
	if o.MemLimit != 0 && o.MemLimit < 1<<20 {
		return optionf("memory limit %d is below 1MiB: the command could not even start", o.MemLimit)
	}
	if o.PID == 0 {
		if _, err := exec.LookPath(o.Argv[0]); err != nil {
			return err
		}
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
	// runMeta is meta.json's state, its warnings and its writer.
	runMeta
	o *Options
	// sess is the tracer's session, nil until it opens.
	sess   *session
	models *models
	spool  *spool
	// fam is the traced processes and the warden that holds them.
	fam   *family
	stats liveStats
	// blockUnfinished counts the block requests put in the spool from
	// BPF's pending map at the end (takeUnfinishedBlockRequests).
	blockUnfinished uint64
	// cost is the recorder's own CPU and wakes (meta.json's recorder).
	cost selfCost
	// snaps takes the models' residency at token starts (residency.go);
	// filemapFaults is what the kernel counted instead of recording.
	snaps         *snapshotter
	filemapFaults func(map[string]uint64)
	// dec counts records act could not decode; only the goroutine that
	// reads the ring touches it.
	dec ingest.DecodeStats
	// ops is what --probe ops costs per token; nil without it.
	ops *opCosts
	// layout validates the ggml struct layout against each graph node.
	layout layoutCheck
	// copies is what the command copied out of its models' mappings.
	copies copies
	// probed is the files searched for symbols, their libraries and the
	// maps snapshots' count.
	probed *probedFiles
	// pf is the prefetcher (Options.Prefetch), nil without it.
	pf *prefetcher
}

// snapshot is the metadata as far as it is known now: what the run set
// up, every model found so far, the probes and libraries attached, the
// layout and op names read from the target, the maps snapshots taken.
// finish and the crash-safe writer both use it.
func (r *recording) snapshot() rundir.Meta {
	var tr *bpf.Tracer
	if r.sess != nil {
		tr = r.sess.tr
	}
	var probes []bpf.Probe
	var lay ggml.Layout
	var opNames, opFuncs, opFiles, opIdle []string
	if tr != nil {
		probes = tr.Probes()
		opFiles, opIdle = tr.OpProbeFiles()
		lay = tr.Layout()
		opNames, _ = tr.OpNames()
		opFuncs = tr.OpFuncs()
	}
	var models []rundir.ModelFile
	if r.models != nil {
		models = r.models.files()
	}
	layoutOK, nodeFailures, layoutErr := r.layout.verdict()
	var ops *rundir.OpProbes
	if tr != nil && r.ops != nil {
		ops = r.ops.summary(opFiles, opIdle, opNames, opFuncs, r.opFirstInstructions(opFiles, opFuncs))
	}
	r.mu.Lock()
	m := r.copyLocked()
	r.mu.Unlock()
	r.fam.meta(&m)
	if r.models != nil {
		m.Models = models
	}
	if tr != nil {
		m.Probes, m.Libraries = nil, nil
		m.Capabilities = capabilities(tr.Capabilities())
		m.FaultsCounted = tr.FaultsCounted()
		for _, p := range probes {
			m.Probes = append(m.Probes, rundir.Probe{Kind: p.Kind, Target: p.Target, Symbol: p.Symbol, Error: p.Error, LandingPad: p.Pad})
		}
		m.Libraries = r.probed.libraries(probes)
		tensor, graph := lay.Map()
		m.Layout = &rundir.Layout{Source: lay.Source, Tensor: tensor, Graph: graph}
		if layoutOK {
			m.Layout.Source += " (validated)"
		}
		if layoutErr != nil {
			m.Layout.Invalid = layoutErr.Error()
		}
		if nodeFailures.Checked > 0 {
			m.Layout.Nodes = &nodeFailures
		}
		m.OpNames, m.OpFuncs = opNames, opFuncs
		if ops != nil {
			m.OpProbes = ops
		}
	}
	return m
}

// opFirstInstructions counts the op functions of files whose probed
// instruction (past a landing pad) is one the kernel emulates on a hit
// and one it steps, as the attach read them with the files' symbols.
func (r *recording) opFirstInstructions(files, opFuncs []string) [2]int {
	var n [2]int
	for _, f := range files {
		emu, step, _ := r.sess.tr.ProbedInstructions(f, opFuncs)
		n[bpf.Emulated] += emu
		n[bpf.Stepped] += step
	}
	return n
}

// residentEnd takes each model's page-cache map with mincore once the
// command has ended, while events are still drained: what `iocorr stats`
// checks the residency replayed from page-cache events against.
func (r *recording) residentEnd() {
	for i, mf := range r.models.files() {
		ranges, n, err := pagecache.ResidentRanges(mf.Path)
		if err != nil {
			r.warn(fmt.Sprintf("model %s: page-cache residency at the end is unknown: %v", mf.Path, err))
			continue
		}
		r.models.setResidentEnd(i, &rundir.PageMap{Resident: n, Ranges: ranges})
	}
}

// finish completes and writes the metadata; derr is the recording error.
// It also runs when the tracer never opened (r.sess is nil).
func (r *recording) finish(exit *launch.Exit, derr error) {
	if derr != nil && !r.warned(derr.Error()) {
		r.warn(fmt.Sprintf("recording failed: %v", derr))
	}
	var nlost uint64
	if r.sess != nil {
		var warnings []string
		nlost, warnings = r.sess.counts().record(&r.m, r.blockUnfinished, r.fam.unheld)
		for _, w := range warnings {
			r.warn(w)
		}
		if exit != nil && !r.hasUserProbes() {
			r.warn(fmt.Sprintf("no llama.cpp symbols (%s) found, kernel events only; searched: %s",
				strings.Join(ggml.ProbeSymbols, ", "), strings.Join(r.probed.searchedFiles(), ", ")))
		}
		// Graphs whose nodes could not be read at all (a wrong node
		// count or array offset) validate nothing: the layout is as
		// unproven as one that failed, and the expert ids were read with it.
		if err := r.layout.unreadable(r.stats.graphs.Load(), len(r.models.files())); err != nil {
			r.warn(layoutFailed(r.sess.tr.Layout(), err))
		}
		if _, nodes, lerr := r.layout.verdict(); lerr == nil && nodes.Failed > 0 {
			m := rundir.Meta{Layout: &rundir.Layout{Nodes: &nodes}}
			r.warn(m.NodesNA())
		}
		if exit != nil {
			for _, w := range missingCapabilities(r.sess.tr.Probes(), r.probed.searchedFiles(), r.o.Probes.Ops, r.hasExperts()) {
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
	if rec := r.cost.summary(); rec != nil {
		r.m.Recorder = rec
	}
	r.finishMeta()
}

// finishMeta writes the final metadata and keeps it as r.m.
func (r *recording) finishMeta() { r.final(r.snapshot()) }

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
	for _, p := range r.sess.tr.Probes() {
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
	r.probed.search(path)
	if _, err := r.sess.tr.AttachUser(path); err != nil {
		r.warn(err.Error())
	}
	r.writer.changed()
}

// act runs on the drain goroutine for every record.
func (r *recording) act(typ uint16, rec []byte) {
	d, ok := ingest.Decode(rec, &r.dec)
	if !ok {
		return
	}
	r.stats.observe(d, r.models)
	if dec := d.Decode(); dec != nil && r.snaps != nil {
		r.snaps.mark(dec)
	}
	switch {
	case d.Mmap() != nil:
		r.onMmap(d.Mmap())
	case d.Task() != nil:
		r.onTask(d.Task())
	case d.Graph() != nil:
		r.onGraph(d.Graph())
	case d.Decode() != nil:
		if r.ops != nil {
			r.ops.onDecode(d.Decode())
		}
	case d.Op() != nil:
		if r.ops != nil {
			r.ops.onOp(d.Op())
		}
	case d.Node() != nil:
		r.onNode(d.Node())
	case d.Place() != nil:
		e := d.Place()
		dev, ino := e.Dev, e.Ino
		if e.VmaBusy != 0 {
			dev, ino, _ = fileAt(e.Hdr.Tgid, e.Data)
		}
		r.copies.onPlace(e, ino != 0 && r.models.known(dev, ino))
	case d.BufName() != nil:
		r.copies.onBufName(d.BufName())
	case d.Experts() != nil:
		r.pf.onPicks(d.Experts(), r.models)
	case d.Fault() != nil:
		r.pf.onFault(d.Fault())
	}
}

// onMmap probes a file the kernel stopped the process for, and snapshots
// the maps of a process that mapped a model.
func (r *recording) onMmap(e *wire.MmapEvent) {
	pid := int(e.Hdr.Tgid)
	// Naming the mapping's file may read the whole of /proc/PID/maps
	// (mappedPath): node maps its files in a few hundred calls, and
	// reading its maps for each was most of the recorder's CPU while it
	// ran. A file decided already needs no name, unless it is probed.
	path := ""
	if e.Stopped == 1 || !r.models.decided(e.Dev, e.Ino) {
		path = mappedPath(pid, e.Start, e.End)
	}
	if e.Stopped == 1 {
		// The kernel stopped the process before it could run code
		// of this file: probe it, then let it go — always.
		switch procmaps.BackingOf(path) {
		case procmaps.BackingFile:
			r.attach(path)
		case procmaps.BackingDeleted:
			r.warn(fmt.Sprintf("%s was deleted while mapped: its code cannot be probed", path))
		}
		// A driver's executable memfd or device mapping holds no ggml
		// symbols: nothing to probe, nothing to say.
		r.fam.cont(pid, "for a uprobe attach")
		return
	}
	isModel, isNew := r.decideFile(e.Dev, e.Ino, path)
	if !isModel {
		return
	}
	if isNew {
		// Reading the file in (MAP_POPULATE, the header read) came
		// before this mmap returned, and the kernel kept page-cache
		// events only of files it knew.
		r.warn(fmt.Sprintf("model %s became known only when it was mapped: its page-cache events before that are not in the record (name it with --model)", path))
		r.writer.changed()
	}
	snap, err := proc.SnapshotMaps(r.o.Dir, r.probed.nextMaps(), pid, e.Hdr.Ts)
	if err != nil {
		r.warn(err.Error())
		return
	}
	r.update(func(m *rundir.Meta) { m.Maps = append(m.Maps, snap) })
	r.writer.changed()
}

// decideFile tells the models a file a traced process mapped (path, ""
// when unknown), and the kernel a file that is no model for good: its
// faults need no record each.
func (r *recording) decideFile(dev uint32, ino uint64, path string) (isModel, isNew bool) {
	isModel, isNew = r.models.mapped(dev, ino, path)
	if !isModel && r.models.decided(dev, ino) {
		if err := r.sess.tr.MarkNotModel(dev, ino); err != nil {
			r.warn(err.Error())
		}
	}
	return isModel, isNew
}

// decideExecMappings decides the files the kernel mapped for a process at
// its exec with no mmap call the tracer sees: its program and its
// interpreter, whose text pages fault all run long.
func (r *recording) decideExecMappings(pid int) {
	maps, err := procmaps.Read(pid)
	if err != nil {
		return // gone already: nothing of it faults any more
	}
	for _, m := range maps {
		if m.Inode != 0 && strings.HasPrefix(m.Path, "/") && !m.Deleted {
			r.decideFile(kernel.Dev(m.Major, m.Minor), m.Inode, m.Path)
		}
	}
}

// onTask keeps the family's set of processes, and takes the models a
// new program names on its command line.
func (r *recording) onTask(e *wire.TaskEvent) {
	r.fam.onTask(e)
	if e.Kind == uint32(wire.TaskKindTASKEV_EXEC) {
		r.modelsInCmdline(int(e.Hdr.Tgid))
		r.decideExecMappings(int(e.Hdr.Tgid))
	}
}

// modelsInCmdline makes the GGUF files a traced process names on its
// command line models, as the command's own are: a descendant that opens
// and reads its model without mapping it (llama.cpp's --load-mode none or
// dio) is then traced too. It runs at the exec, before the program has
// started loading anything.
func (r *recording) modelsInCmdline(pid int) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return
	}
	argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	if len(argv) < 2 {
		return
	}
	// A relative name is the process's, not the recorder's.
	for _, p := range candidatesIn(argv, fmt.Sprintf("/proc/%d/cwd", pid), r.models.has) {
		if _, err := r.models.add(p); err != nil {
			r.warn(err.Error())
			continue
		}
		r.writer.changed()
	}
}

// onGraph puts the op probes on (--probe ops) at a file's first graph.
func (r *recording) onGraph(e *wire.GraphEvent) {
	if !r.o.Probes.Ops {
		return
	}
	// The first graph of a file: its op probes go on now, while the
	// kernel holds the process stopped (if it could) before the graph runs.
	attached, err := r.sess.tr.AttachPendingOps(e.File)
	if err != nil {
		r.warn(err.Error())
	}
	if e.Stopped == 1 {
		r.fam.cont(int(e.Hdr.Tgid), "for the op-probe attach")
	} else if attached {
		r.warn("the process could not be stopped for the op-probe attach: ops of its first graph may be missing")
	}
	if attached {
		r.writer.changed()
	}
}

// onNode validates the layout the probes read ggml's structs with against
// each graph node; once most nodes fail, those probes come off.
func (r *recording) onNode(e *wire.NodeEvent) {
	if r.ops != nil {
		r.ops.onNode(e)
	}
	if r.layout.failure() != nil {
		return
	}
	names, _ := r.sess.tr.OpNames()
	changed, err := r.layout.check(e.GraphId, nodeOf(e, r.models), len(names), r.models)
	if err == nil {
		if changed {
			r.writer.changed()
		}
		return
	}
	if derr := r.sess.tr.DisableLayoutProbes(); derr != nil {
		r.warn(fmt.Sprintf("detaching the probes that read ggml structs: %v", derr))
	}
	r.warn(layoutFailed(r.sess.tr.Layout(), err))
	r.writer.changed()
}

// fileAt is the file, and its offset, that process pid maps at addr now,
// from its maps: for an event whose address the kernel could not look up
// (vma_busy), rare enough to read the maps for. Zero when none is known.
func fileAt(pid uint32, addr uint64) (dev uint32, ino, off uint64) {
	ms, err := procmaps.Read(int(pid))
	if err != nil {
		return 0, 0, 0
	}
	i := procmaps.Containing(ms, addr)
	if i < 0 || ms[i].Inode == 0 {
		return 0, 0, 0
	}
	m := ms[i]
	return kernel.Dev(m.Major, m.Minor), m.Inode, m.Offset + addr - m.Start
}
