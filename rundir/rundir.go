// Package rundir defines the run directory that `iocorr record` writes and
// every other subcommand reads: its file names and the metadata beside the
// raw event spool.
//
// The metadata is JSON so that a person can read it and other tools can use
// it; the events themselves are in the binary spool (package ingest), and
// the joined store lives in db/ (package store).
package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/procmaps"
)

// Default is the run directory used when none is given, as perf uses
// perf.data.
const Default = "iocorr.data"

// Names of the files inside a run directory.
const (
	MetaFile  = "meta.json"          // Meta
	SpoolFile = "events.spool"       // raw BPF events, package ingest
	MapsDir   = procmaps.SnapshotDir // /proc/PID/maps snapshots, see MapsSnapshot
	DBDir     = "db"                 // the badger store, package store
)

// The machine's facts a run keeps, read by internal/proc and
// internal/blockdev, which stand below the run directory and so own them.
type (
	Host         = kernel.Host        // the machine a run was recorded on
	BlockDevice  = kernel.BlockDevice // the device holding a model file
	Extent       = kernel.Extent      // one FIEMAP extent of a model file
	DiskStat     = kernel.DiskStat    // one line of /proc/diskstats
	MapsSnapshot = procmaps.Snapshot  // a copy of /proc/PID/maps
)

// FormatVersion changes when a reader of an older run would misread it.
// Version 2 added Finished: meta.json is rewritten while recording, so a
// run whose recorder died has a meta.json that is not its last word.
const FormatVersion = 2

// unfinishedV1 is the warning format 1 wrote first and replaced at the
// end of an orderly recording: still there, the recorder died.
const unfinishedV1 = "recording did not finish"

// Meta is everything recorded about a run besides its events.
type Meta struct {
	FormatVersion int       `json:"format_version"`
	Version       string    `json:"iocorr_version"`
	Command       []string  `json:"command"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	// MonoStartNS is CLOCK_MONOTONIC at Start: event timestamps are
	// monotonic (bpf_ktime_get_ns), and this pins them to wall time.
	MonoStartNS uint64 `json:"mono_start_ns"`
	MonoEndNS   uint64 `json:"mono_end_ns"`

	Host Host `json:"host"`

	// ProbeSet is "graph" (default) or "ops", followed by ",pagecache" in
	// the pagecache tier, ",sched" when scheduler events were recorded and
	// ",faults" when every fault was; read it with HasProbeSet.
	ProbeSet string `json:"probe_set"`
	// Tier is TierDefault or TierPageCache; empty in runs recorded before
	// tiers, which all recorded page-cache events.
	Tier   string  `json:"tier,omitempty"`
	Probes []Probe `json:"probes"`
	// Capabilities are the path the tracer took for each capability on
	// this kernel (bpf.Capabilities' table), or NA with the reason.
	Capabilities []Capability `json:"capabilities,omitempty"`
	// FaultsCounted names the faults outside the model files the kernel
	// counted per thread, token and class instead of recording each
	// ("anonymous memory, files that are no model"); empty when every
	// fault was recorded (--probe faults, or a kernel that cannot tell
	// where a fault is). FaultDetailNA says what that leaves out.
	FaultsCounted string `json:"faults_counted,omitempty"`
	// OpProbes is set for --probe ops.
	OpProbes *OpProbes `json:"op_probes,omitempty"`
	// Layout is the ggml struct layout the user-space probes used.
	Layout *Layout `json:"layout,omitempty"`
	// OpNames maps the target's enum ggml_op values to names, as read
	// from the target (or the built-in table when it could not be read).
	OpNames []string `json:"op_names,omitempty"`
	// OpFuncs maps op_event.fn (the uprobe cookie) to the probed symbol.
	OpFuncs []string `json:"op_funcs,omitempty"`

	// Libraries are the files user-space probes were attached to, with
	// their GNU build ids: which llama.cpp build was traced.
	Libraries []Library `json:"libraries,omitempty"`
	GoVersion string    `json:"go_version,omitempty"`

	Models []ModelFile    `json:"models"`
	Maps   []MapsSnapshot `json:"maps,omitempty"`

	Child Child `json:"child"`
	// Recorder is iocorr's own use of the machine over the recording
	// (getrusage of itself, without the command), taken as it finishes.
	Recorder *Recorder `json:"recorder,omitempty"`
	// Pauses says how traced processes were held while uprobes were
	// attached to a file they had just mapped (or before a first graph,
	// with op probes); Family, the processes traced besides the command.
	Pauses *Pauses `json:"pauses,omitempty"`
	Family *Family `json:"family,omitempty"`
	// Attached is set for a run of a process that was already running
	// (`record -p PID`): there was no fork-time start, so what it did
	// before the attach is not in the run.
	Attached *Attached `json:"attached,omitempty"`

	Controls Controls `json:"controls"`

	DiskBefore []DiskStat `json:"diskstats_before,omitempty"`
	DiskAfter  []DiskStat `json:"diskstats_after,omitempty"`

	// Counts holds events written to the spool per event type name, and
	// Lost the events the kernel could not put in the ring buffer. Lost is
	// always present, also when all are zero.
	Counts map[string]uint64 `json:"counts"`
	// BlockIncomplete counts block requests whose completion never
	// reached the tracer (or had not come at the end): they are recorded
	// from their issue, their bytes counted, their latency NA.
	BlockIncomplete uint64 `json:"block_incomplete"`
	// BlockRequeues counts requests the device refused and the kernel
	// requeued while iocorr held them as issued: each was counted once,
	// at its last issue's completion. Nil where the kernel has no requeue
	// hook (the block capability's fallback path) and in older runs.
	BlockRequeues *uint64           `json:"block_requeues,omitempty"`
	Lost          map[string]uint64 `json:"lost"`
	// PageRunsUnordered counts page-cache runs recorded, not lost, but
	// perhaps after a page event of the same pages (their slot was held by
	// another CPU past the kernel's spin); the store orders them by time.
	PageRunsUnordered uint64 `json:"page_runs_unordered,omitempty"`
	// PausesUnsent counts the pauses for a uprobe attach whose SIGSTOP
	// the kernel refused to send: the files they were for were probed
	// while the process ran on.
	PausesUnsent uint64 `json:"pauses_unsent,omitempty"`
	// LoopsCut counts what the kernel's bounded loops (the loops
	// capability's fallback, without bpf_loop) left unread; nil on the
	// bpf_loop path and when nothing was cut.
	LoopsCut *LoopsCut `json:"loops_cut,omitempty"`
	// ResidencySnapshots says how many token starts got a residency
	// snapshot (ResidencyFile); nil in runs recorded before them.
	ResidencySnapshots *SnapshotStats `json:"residency_snapshots,omitempty"`
	// Disk is the kept profile (`iocorr doctor --disk`) of the disk that
	// holds the run's models, copied at the recording's end; nil when the
	// disk was never measured (DiskNA).
	Disk *DiskProfile `json:"disk,omitempty"`

	// Complete is false when recording stopped early (the child crashed,
	// the disk filled, a signal); Warnings say why and what is missing.
	Complete bool `json:"complete"`
	// Finished is set when `iocorr record` reached its end in order,
	// whatever became of the command. A run whose recorder died (SIGKILL,
	// the OOM killer) keeps false: its spool and what meta.json said when
	// it died are all there is.
	Finished bool     `json:"finished"`
	Warnings []string `json:"warnings,omitempty"`
}

// Status says in one line why a run's figures are partial, or "" when
// recording finished complete. Query and export outputs print it in their
// headers, so that partial totals are never mistaken for whole ones.
func (m *Meta) Status() string {
	switch {
	case !m.Finished && m.FaultsCounted != "":
		// The kernel's counts are read once, at the run's end.
		return "incomplete run: the recorder did not finish (killed?); figures cover what was recorded until it stopped, and the faults outside the model files (" + m.FaultsCounted + "), counted in the kernel and read at the end, are missing"
	case !m.Finished:
		return "incomplete run: the recorder did not finish (killed?); figures cover what was recorded until it stopped"
	case !m.Complete:
		return "incomplete run: " + firstOr(m.Warnings, "recording stopped early") + " (see meta.json warnings)"
	}
	return ""
}

func firstOr(xs []string, def string) string {
	if len(xs) > 0 {
		return xs[0]
	}
	return def
}

// Probe is one attached (or failed) probe.
type Probe struct {
	Kind   string `json:"kind"`   // tracepoint, tp_btf, perf_event, uprobe, uretprobe
	Target string `json:"target"` // tracepoint name, or file for uprobes
	Symbol string `json:"symbol,omitempty"`
	Error  string `json:"error,omitempty"`
	// LandingPad is how many bytes into the function a uprobe sits: past
	// the endbr64 a CET build opens functions with, which the kernel
	// single-steps on every hit where it emulates the push after it.
	LandingPad int `json:"landing_pad,omitempty"`
}

// Capability is one capability of the tracer as a run had it: the path
// taken ("" when NA), whether it is the primary one, the kernel that path
// needs, what the run loses with it (the NA reason when no path was
// taken) and why a better path was not taken.
type Capability struct {
	Name    string `json:"name"`
	Path    string `json:"path,omitempty"`
	Primary bool   `json:"primary"`
	Kernel  string `json:"kernel"`
	Lost    string `json:"lost,omitempty"`
	Why     string `json:"why,omitempty"`
	Off     bool   `json:"off,omitempty"`
}

// CapabilityNotes are one line per capability a run had on no primary
// path (fallback or NA), for the summaries of every output; optional
// capabilities the run did not ask for are left out.
func (m *Meta) CapabilityNotes() []string {
	var out []string
	for _, c := range m.Capabilities {
		switch {
		case c.Off || c.Primary:
		case c.Path == "":
			out = append(out, fmt.Sprintf("%s: NA: %s (%s)", c.Name, c.Lost, c.Why))
		default:
			out = append(out, fmt.Sprintf("%s: fallback %s: loses %s", c.Name, c.Path, c.Lost))
		}
	}
	return out
}

// FaultOffsetsInUserSpace says whether the run's kernel left fault file
// offsets to user space (no bpf_find_vma): every fault is then resolved
// from the mappings seen.
func (m *Meta) FaultOffsetsInUserSpace() bool {
	for _, c := range m.Capabilities {
		if c.Name == CapFaultOffsets {
			return c.Path != "" && !c.Primary
		}
	}
	return false
}

// CapFaultOffsets and CapLoops are bpf's capability names, named here for
// the read side.
const (
	CapFaultOffsets = "fault offsets"
	CapLoops        = "loops"
)

// OpProbes is what --probe ops cost and where it probed: the op probes go
// only on the CPU backend that computed a graph (node-llama-cpp loads a
// dozen variants and runs one).
type OpProbes struct {
	Files []string `json:"files"`          // files whose op functions were probed
	Idle  []string `json:"idle,omitempty"` // files with op functions that computed no graph, not probed
	// Unprobed names the ops of weight-reading nodes that have no op
	// function in the build (inlined, as MUL_MAT_ID is in llama.cpp's
	// CPU backend), with their node count: those nodes have no op events,
	// so their weights' I/O is charged to the op running at the time.
	Unprobed map[string]int `json:"unprobed,omitempty"`
	// Fused counts by op the weight-reading nodes whose op function is
	// probed but never ran for them: the CPU backend computed them inside
	// a neighbour (it fuses RMS_NORM with the MUL by the norm weight).
	Fused map[string]int `json:"fused,omitempty"`
	// PerHitNS is one uprobe hit on this machine, measured at the start
	// of the recording (bpf.MeasureUprobeCost) on functions beginning as
	// the probed op functions do (FirstInstruction counts them by what
	// the kernel does with their first instruction on a hit: "emulated"
	// or "stepped", whose hits cost 3–4× more here); 0 with CalibrationNA.
	PerHitNS         int64          `json:"per_hit_ns"`
	FirstInstruction map[string]int `json:"first_instruction,omitempty"`
	CalibrationNA    string         `json:"calibration_na,omitempty"`
	// Per decode call of the traced command: op-probe hits (every thread)
	// and wall time, mean and max.
	Tokens           int     `json:"tokens"`
	HitsPerTokenMean float64 `json:"hits_per_token_mean"`
	HitsPerTokenMax  uint64  `json:"hits_per_token_max"`
	TokenNSMean      float64 `json:"token_ns_mean"`
	// Overhead estimates: hits × cost per hit ÷ token time, here and with
	// bare metal's 0.3–0.7 µs per hit.
	OverheadRatio          float64    `json:"overhead_ratio"`
	BareMetalOverheadRatio [2]float64 `json:"bare_metal_overhead_ratio"`
}

// Layout records the offsets in struct ggml_tensor and ggml_cgraph that
// the probes read, and where they came from.
type Layout struct {
	Source string         `json:"source"` // "dwarf:PATH" or "builtin (validated)"
	Tensor map[string]int `json:"tensor"`
	Graph  map[string]int `json:"graph"`
	// Invalid says why the layout failed validation against the target
	// (a graph node that does not match the traced model): the graph,
	// expert and op records of such a run are not to be read.
	Invalid string `json:"invalid,omitempty"`
	// Nodes is what the validation of a layout that holds met: nodes the
	// target made otherwise than its GGUF says, each left out of the
	// record (correlate attributes no op or device from it).
	Nodes *NodeFailures `json:"nodes,omitempty"`
}

// NodeFailures counts the graph nodes checked and failed, and names each
// distinct failing node once.
type NodeFailures struct {
	Checked int           `json:"checked"`
	Failed  int           `json:"failed"`
	Nodes   []NodeFailure `json:"failures,omitempty"`
}

// NodeFailure is a graph node (by its name and its weight's) that failed
// validation, and why.
type NodeFailure struct {
	Node   string `json:"node"`
	Weight string `json:"weight"`
	Why    string `json:"why,omitempty"`
}

// Left reports whether the node named node, reading weight, failed
// validation and is left out of the record.
func (l *Layout) Left(node, weight string) bool {
	if l == nil || l.Nodes == nil {
		return false
	}
	for _, f := range l.Nodes.Nodes {
		if f.Node == node && f.Weight == weight {
			return true
		}
	}
	return false
}

// Library is an ELF file that was probed.
type Library struct {
	Path    string `json:"path"`
	BuildID string `json:"build_id,omitempty"`
	// BuildIDError says why BuildID is empty when the file could not be
	// read (a file without a build id has neither).
	BuildIDError string `json:"build_id_error,omitempty"`
	Size         int64  `json:"size"`
}

// ModelFile is a GGUF file the child mapped (or --model named).
type ModelFile struct {
	Path string `json:"path"`
	// Dev is the kernel's encoding (major<<20 | minor), as in the
	// tracepoints and in struct super_block's s_dev.
	Dev  uint32 `json:"dev"`
	Ino  uint64 `json:"ino"`
	Size int64  `json:"size"`

	DataOffset int64    `json:"data_offset"`
	Tensors    []Tensor `json:"tensors"`

	Block   BlockDevice `json:"block_device"`
	Extents []Extent    `json:"extents"`
	// Beneath are the files the model's disk is stacked on, the nearest
	// first: a loop device's backing file, and that file's own where its
	// disk is a loop device too. Each request of the model's disk is read
	// again from them: the trace keeps those reads, apart (a block
	// event's ClassBeneath), and counts them in no figure.
	Beneath []BackingFile `json:"beneath,omitempty"`
	// BlockNA says why the model's block requests cannot be told from
	// others' ("" when they can): its disk is a device mapper's or md's,
	// whose requests are issued at the devices beneath, at their own
	// sectors.
	BlockNA string `json:"block_na,omitempty"`

	// ResidentBefore is how many of the file's pages were in the page
	// cache when the child started (mincore), after --cold if asked.
	ResidentBefore int64 `json:"resident_pages_before"`
	Pages          int64 `json:"pages"`
	// ResidentEnd is what mincore found in the page cache when the
	// command had ended: the check of the residency that page-cache
	// events replay. Nil when not taken.
	ResidentEnd *PageMap `json:"resident_end,omitempty"`
}

// BackingFile is a loop device's backing file: where it lies on its own
// disk.
type BackingFile struct {
	Path string `json:"path"`
	// Offset is the byte of the file the loop device's first sector is.
	Offset  uint64      `json:"offset"`
	Block   BlockDevice `json:"block_device"`
	Extents []Extent    `json:"extents"`
}

// PageMap lists a file's resident pages as ranges [first, end) of page
// numbers, in order.
type PageMap struct {
	Resident int64      `json:"resident_pages"`
	Ranges   [][2]int64 `json:"ranges"`
}

// Tensor is one tensor of a model file, with its absolute byte range.
type Tensor struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"`
	Shape  []uint64 `json:"shape"`
	Offset int64    `json:"offset"`
	Size   int64    `json:"size"`
	Layer  int      `json:"layer"` // -1 when not in a block
	Role   string   `json:"role"`  // e.g. attn_q, ffn_down_exps
	// Experts and ExpertStride describe *_exps tensors: expert e holds
	// [Offset + e*ExpertStride, Offset + (e+1)*ExpertStride).
	Experts      int   `json:"experts,omitempty"`
	ExpertStride int64 `json:"expert_stride,omitempty"`
}

// Child is what became of the traced command.
type Child struct {
	PID       int    `json:"pid"`
	ExitCode  int    `json:"exit_code"`
	Signal    string `json:"signal,omitempty"`
	UID       int    `json:"uid"`
	GID       int    `json:"gid"`
	MajFlt    int64  `json:"majflt"`
	MinFlt    int64  `json:"minflt"`
	InBlock   int64  `json:"inblock"`
	OutBlock  int64  `json:"oublock"`
	MaxRSSKiB int64  `json:"maxrss_kib"`
	UserNS    int64  `json:"utime_ns"`
	SystemNS  int64  `json:"stime_ns"`
}

// Recorder is the recording process's own rusage: what tracing cost in
// CPU and memory, apart from the command (RUSAGE_SELF, no children).
type Recorder struct {
	MaxRSSKiB int64 `json:"maxrss_kib"`
	UserNS    int64 `json:"utime_ns"`
	SystemNS  int64 `json:"stime_ns"`
	// Of that CPU (user+sys), what it had spent before it let the command
	// run (loading the probes, the controls), and what while the command
	// ran, up to its exit: only the latter competed with the command.
	// The rest came after. Absent where not measured (record -p).
	BeforeNS int64 `json:"cpu_before_ns,omitempty"`
	WhileNS  int64 `json:"cpu_while_ns,omitempty"`
	// WakesWhile are the times it went to sleep and was woken (its
	// threads' voluntary context switches) while the command ran: on a
	// VM whose idle vCPUs halt, how often anything wakes changes how a
	// program whose threads spin and sleep runs (docs/overhead.md,
	// session 14). The ptrace warden, a process of its own, is not in it.
	// Nil where not measured.
	WakesWhile *int64 `json:"wakes_while,omitempty"`
}

// Pauses: Invisible when every traced process was ptraced by iocorr's
// warden, whose stops no parent, child or sibling can observe; otherwise
// a pause was a SIGSTOP its parent could see, and VisibleWhy says why.
type Pauses struct {
	Invisible  bool   `json:"invisible"`
	VisibleWhy string `json:"visible_why,omitempty"`
	Held       int    `json:"held"`
	MaxHoldNS  int64  `json:"max_hold_ns"`
	// Unheld counts pauses not taken: the thread that asked for one had
	// not been seized by the warden yet (it seizes threads a little after
	// they start, rather than stopping every clone).
	Unheld uint64 `json:"unheld,omitempty"`
}

// Attached: the process, and its own major-fault count (/proc/PID/stat)
// at the attach and at the detach, each read while it was frozen: their
// difference is what the run's major faults of that process are.
type Attached struct {
	PID          int    `json:"pid"`
	MajFltBefore uint64 `json:"majflt_before"`
	MajFltAfter  uint64 `json:"majflt_after"`
	Exited       bool   `json:"exited,omitempty"` // it ended within the window
}

// Family is what the recording saw of the command's descendants: how
// many processes were traced in all, those still running when the
// recording ended (it lasts while any lives, unless interrupted), and
// those orphaned by their parent that iocorr reaped as their subreaper
// (their rusage is in Child's).
type Family struct {
	Processes   int   `json:"processes"`
	LeftRunning []int `json:"left_running,omitempty"`
	Orphans     []int `json:"orphans,omitempty"`
}

// Controls records the experiment controls of the run.
type Controls struct {
	Cold       bool   `json:"cold"`
	DropCaches bool   `json:"drop_caches"`
	MemLimit   int64  `json:"mem_limit,omitempty"`
	Cgroup     string `json:"cgroup,omitempty"` // path of the cgroup used
	CgroupVer  int    `json:"cgroup_version,omitempty"`
	// CgroupCounters holds the cgroup's own counters at the end
	// (v2 memory.events, v1 memory.failcnt, max usage...).
	CgroupCounters map[string]uint64 `json:"cgroup_counters,omitempty"`
	// Pinned is the pin plan held in RAM for the run (record --pin).
	Pinned *Pinned `json:"pinned,omitempty"`
	// Prefetched is what the prefetcher did (record --prefetch).
	Prefetched *Prefetched `json:"prefetched,omitempty"`
}

// Prefetched says what the prefetcher (package prefetch) asked the kernel
// for, from the router's picks, and what became of it. Bytes are whole
// pages. Arrived, late and evicted unused split the asked bytes by the
// command's major faults on them; they are NA (OutcomeNA) when the faults
// were not traced.
type Prefetched struct {
	// Window bounds the bytes brought in for one layer's picks; 0 is
	// unbounded.
	Window int64 `json:"window_bytes"`
	// Layers: the next layer's dense weights were asked for too, at each
	// layer's first pick, after its experts.
	Layers bool `json:"next_layers"`
	// Release: the pages brought in for a layer were released once it
	// used them (process_madvise MADV_COLD at the next layer's picks);
	// ReleasedBytes is what the kernel took the advice for.
	Release       bool  `json:"release,omitempty"`
	ReleasedBytes int64 `json:"released_bytes,omitempty"`
	// ReleaseNA says why nothing was released where no error does.
	ReleaseNA string `json:"release_na,omitempty"`
	// Picks are the router decisions acted on (one a layer a token).
	Picks uint64 `json:"picks"`
	// Ranges are the picked experts' slices (and the next layers' dense
	// weights, with Layers), Bytes their pages (a page two slices share
	// counts in each): Resident, OverWindow, Dropped and Asked split them.
	Ranges uint64 `json:"ranges"`
	Bytes  int64  `json:"bytes"`
	// ResidentBytes of them were in the page cache already; OverWindow
	// were not asked for, the layer's window being full.
	ResidentBytes   int64 `json:"resident_bytes"`
	OverWindowBytes int64 `json:"over_window_bytes"`
	// DroppedBytes were not asked for either: the helper was so far
	// behind that its queue was full.
	DroppedBytes int64 `json:"dropped_bytes"`
	// AskedBytes were asked of the kernel (posix_fadvise WILLNEED) in
	// Calls runs of pages; Failed of the calls returned an error.
	AskedBytes int64  `json:"asked_bytes"`
	Calls      uint64 `json:"calls"`
	Failed     uint64 `json:"failed_calls"`
	// ArrivedBytes were in the page cache at their first use (no major
	// fault on them); LateBytes were faulted in by the command before the
	// kernel had the request; EvictedUnusedBytes were brought in and
	// faulted in again, evicted before they were used. A page of either
	// is one major fault of the command, with its read-around.
	ArrivedBytes       int64  `json:"arrived_bytes"`
	LateBytes          int64  `json:"late_bytes"`
	EvictedUnusedBytes int64  `json:"evicted_unused_bytes"`
	OutcomeNA          string `json:"outcome_na,omitempty"`
	// ModelMajorFaults are the command's major faults in the model files
	// the prefetcher saw (those it did not prevent); PickedMajorFaults
	// those of them in a picked slice, on a page it did not bring in
	// (cached when asked and evicted before use, or faulted on before
	// the pick reached it): each reads the fault's whole read-around.
	ModelMajorFaults  uint64 `json:"model_major_faults"`
	PickedMajorFaults uint64 `json:"picked_major_faults"`
	// CachedMajorFaults are those of PickedMajorFaults on a page cached
	// when its slice was asked for (so not asked for), begun after the
	// ask: evicted before its use, under the budget's pressure.
	CachedMajorFaults uint64 `json:"cached_major_faults"`
	// HelperCPUNS is the helper's CPU (user+sys) that made the calls,
	// SelfCPUNS iocorr's own on the picks and faults.
	HelperCPUNS int64 `json:"helper_cpu_ns"`
	SelfCPUNS   int64 `json:"self_cpu_ns"`
	// Errors say what went wrong, if anything.
	Errors []string `json:"errors,omitempty"`
}

// Pinned says what a pin plan locked in the command's memory cgroup
// before it started: the plan file, its model, its ranges and the bytes
// the holder locked (pages), held until the command ended.
type Pinned struct {
	Plan   string `json:"plan"`
	Model  string `json:"model"`
	Ranges int    `json:"ranges"`
	Bytes  int64  `json:"bytes"`
	// HolderAnon is the holder's own anonymous memory, charged to the
	// command's budget beside the pin.
	HolderAnon int64 `json:"holder_anon_bytes"`
}

// ReadMeta reads DIR/meta.json.
func ReadMeta(dir string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is not a run directory (no %s): %w", dir, MetaFile, err)
		}
		return nil, fmt.Errorf("reading run metadata: %w", err)
	}
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", filepath.Join(dir, MetaFile), err)
	}
	if m.FormatVersion > FormatVersion {
		return nil, fmt.Errorf("%s was written by a newer iocorr (format %d, this one reads up to %d)", dir, m.FormatVersion, FormatVersion)
	}
	if m.FormatVersion < 2 {
		// Format 1 had no "finished": its recorder wrote meta.json twice,
		// first with one warning saying the recording did not finish,
		// then, at an orderly end, with the final warnings.
		m.Finished = !slices.Contains(m.Warnings, unfinishedV1)
	}
	return &m, nil
}

// WriteMeta writes DIR/meta.json atomically, so that a crash while
// writing leaves the previous version readable.
func WriteMeta(dir string, m *Meta) error {
	m.FormatVersion = FormatVersion
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding run metadata: %w", err)
	}
	// Not synced: meta.json is rewritten as facts become known, and what a
	// crash loses is at most the facts since the last write.
	if err := atomicfile.WriteBytes(filepath.Join(dir, MetaFile), 0o644, false, append(b, '\n')); err != nil {
		return fmt.Errorf("run metadata: %w", err)
	}
	return nil
}
