package bpf

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"slices"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// Options select what the tracer records.
type Options struct {
	// Probes are the probe sets (record --probe), each off by default
	// for its cost: Ops attaches a uprobe to every exported
	// ggml_compute_forward_* function for per-op timing (one hit per op
	// per compute thread); Sched attaches to sched_switch and
	// sched_wakeup for the thread states of traced threads (every context
	// switch of the machine pays the program's tgid test); PageCache is
	// the pagecache tier, page-cache adds and evictions of the model files
	// (tiers.go); Faults records every fault as a record, where those
	// outside the model files are otherwise counted in the kernel per
	// thread and token (faultcounts.go).
	Probes rundir.ProbeSet
	// RingBufBytes sizes the ring buffer (a power of two, at least a
	// page); 0 means DefaultRingBufBytes.
	RingBufBytes int
	// PageRecords says how page-cache adds and deletions are recorded:
	// coalesced into EV_PAGE_RUN records (the default), or one EV_PAGE_ADD
	// or EV_PAGE_DEL per folio as the kernel reports them, or both side by
	// side (to check the runs against the folios of the same events).
	PageRecords PageRecords
	// Prefetch serves a prefetcher (the prefetch package) from the ring:
	// every router pick wakes the reader at once, as the experts it names
	// are read within their layer, well before the reader's next poll.
	Prefetch bool
	// PrefetchOnly attaches only what a prefetcher needs besides the
	// graph probes (`iocorr prefetch`, not a recording): the traced
	// processes, their mappings (libraries to probe) and the faults with
	// their file offsets (whether what it asked for arrived before use);
	// no block, page-cache, read-call or scheduler hooks.
	PrefetchOnly bool
	// StopAtTokens stops a traced process at each token's start until
	// user space resumes it (TokenStops), for exact residency snapshots.
	StopAtTokens bool
	// SelfPID is filtered out of block events (iocorr's own writes).
	SelfPID int
	// Devices, when not empty, limits block events to these whole-disk
	// devices (kernel dev_t encoding). Empty keeps every device.
	Devices []uint32
	// Layout overrides the built-in ggml struct layout (from DWARF).
	Layout *ggml.Layout
	// Without names kernel features (Features) the tracer behaves as if
	// this kernel lacked, so that their fallbacks run; IOCORR_WITHOUT
	// (WithoutEnv) adds to it.
	Without []string
	// LoadSpec, when set, gives the BPF objects to load in place of the
	// built-in ones (LoadIocorr). Only tests set it: the one way to see
	// what this kernel's verifier really does with a program it refuses
	// is to load one, and recorder's tests reach Open only through
	// Options (IOCORR_WITHOUT switches features off before anything
	// loads, so it cannot stand for a refusal).
	LoadSpec func() (*ebpf.CollectionSpec, error)
}

// PageRecords selects the page-cache records (Options.PageRecords).
type PageRecords uint32

// The values are PAGES_* of pagecache.bpf.h.
const (
	PageRuns          PageRecords = 0
	PageFolios        PageRecords = 1
	PageRunsAndFolios PageRecords = 2
)

// runWays is RUN_WAYS of pagecache.bpf.h: page-cache run slots per CPU.
const runWays = 4

// DefaultRingBufBytes is the ring buffer size when none is given. Page-cache
// runs keep a run under memory pressure to a few thousand records per GiB
// read, so a few MiB hold several seconds of events.
const DefaultRingBufBytes = 8 << 20

// Probe is one attached (or failed) probe, as recorded in the run metadata.
type Probe struct {
	Kind   string
	Target string
	Symbol string
	Error  string
	// Pad is how many bytes past the symbol a uprobe sits: a landing pad
	// it skips (ggml.Symbols.Pad).
	Pad int
}

// Tracer owns the loaded BPF objects and their attachments.
type Tracer struct {
	objs  IocorrObjects
	opts  Options
	links []link.Link
	perf  []*perfEvent
	rd    *Ring

	mu       sync.Mutex
	probes   []Probe
	attached map[fileID]bool
	opFuncs  []string
	opIndex  map[string]uint64
	layout   ggml.Layout
	// layoutFixed is set once the layout came from the caller or from a
	// library's DWARF; later libraries do not change it.
	layoutFixed bool
	opNames     []string
	opSource    string
	// files are the files with graph_compute probes, by attach cookie;
	// pendingOps their op functions, attached at the file's first graph
	// (AttachPendingOps) so that only the CPU backend that runs pays.
	files      []string
	pendingOps map[uint32][]string
	// offsets: where each probed function of a file (by its real path)
	// begins in it.
	offsets map[string]map[string]uint64
	// pads: how many bytes of a landing pad each one's probe skips;
	// emulated: whether the kernel emulates the instruction it sits on.
	pads     map[string]map[string]int
	emulated map[string]map[string]bool
	// layoutLinks are the probes that read ggml structs with the layout
	// (graphs, expert picks, ops); DisableLayoutProbes closes them and
	// sets layoutOff, after which such probes are not kept.
	layoutLinks []link.Link
	layoutOff   bool
	// caps are the path taken for each capability (Capabilities' order).
	caps []capChoice
	// countFaults is cfg.count_faults as loaded (faultcounts.go).
	countFaults uint8
	// keepsRuns: cfg.page_records as loaded keeps runs (KeepsPageRuns).
	keepsRuns bool
	// notModels are the files MarkNotModel put in the kernel's map.
	notModelsMu sync.Mutex
	notModels   map[fileID]bool
}

type fileID struct {
	dev uint64
	ino uint64
}

// ErrPrivileges is returned when the process may not load BPF programs.
var ErrPrivileges = errors.New("loading BPF programs needs root (or CAP_BPF and CAP_PERFMON)")

// Open loads the programs and attaches the kernel side: tracepoints for
// faults, page cache, readahead, block requests, processes and mmap, and
// the software page-fault perf events on every CPU. User-space probes come
// later, per file, with AttachUser.
func Open(opts Options) (*Tracer, error) {
	if opts.RingBufBytes == 0 {
		opts.RingBufBytes = DefaultRingBufBytes
	}
	if opts.RingBufBytes < os.Getpagesize() || opts.RingBufBytes&(opts.RingBufBytes-1) != 0 {
		return nil, fmt.Errorf("ring buffer size %d is not a power of two of at least a page", opts.RingBufBytes)
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("kernel BTF not found (/sys/kernel/btf/vmlinux): this kernel needs CONFIG_DEBUG_INFO_BTF: %w", err)
	}
	// Best effort: kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK;
	// newer ones account it to the memory cgroup, and raising the limit
	// may be refused (no CAP_SYS_RESOURCE), which is then harmless.
	_ = rlimit.RemoveMemlock()

	without, err := parseWithout(opts.Without)
	if err != nil {
		return nil, err
	}
	detectMu.Lock()
	d := newDetector(without)
	caps := choose(d, opts.wanted)
	detectMu.Unlock()
	for _, c := range caps {
		if c.Required && c.path == nil {
			if d.unprivileged() {
				return nil, fmt.Errorf("%w: the kernel refused to be probed for its BPF features", ErrPrivileges)
			}
			return nil, fmt.Errorf("this kernel cannot record (%s: %s): %s", c.Name, c.What, c.Why)
		}
	}

	loadSpec := LoadIocorr
	if opts.LoadSpec != nil {
		loadSpec = opts.LoadSpec
	}
	spec, err := loadSpec()
	if err != nil {
		return nil, fmt.Errorf("loading BPF spec: %w", err)
	}
	spec.Maps["events"].MaxEntries = uint32(opts.RingBufBytes)
	lay := ggml.BuiltinLayout
	if opts.Layout != nil {
		lay = *opts.Layout
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("counting CPUs: %w", err)
	}
	// RUN_SLOTS of pagecache.bpf.h, runWays per CPU; CPUs beyond have none.
	runSlots := int(spec.Variables["runs"].Size()) / int(unsafe.Sizeof(IocorrRunSlot{}))
	pageRecords, err := opts.pageRecordsConst(caps)
	if err != nil {
		return nil, err
	}
	// Every setting the programs read, set once before load (read-only
	// data the kernel freezes: the verifier drops what a setting turns off).
	cfg := IocorrConfig{
		SelfTgid:    uint32(opts.SelfPID),
		PageShift:   uint32(bits.TrailingZeros(uint(os.Getpagesize()))),
		PageRecords: pageRecords,
		// Slots beyond the CPUs would never be used: flushes scan only these.
		RunSlots:   uint32(min(runWays*cpus, runSlots)),
		ProbeOps:   opts.Probes.Ops,
		UseBpfLoop: chosenPrimary(caps, CapLoops),
		// The fault and mmap programs resolve mappings in the kernel
		// only where it has the helper (the fault offsets' primary path).
		UseFindVma: chosenPrimary(caps, CapOffsets),
		// Exact residency snapshots (tiers.go).
		StopAtTokens: opts.StopAtTokens,
		FilterDevs:   len(opts.Devices) > 0,
		CountFaults:  opts.countFaultsConst(caps),
		WakePicks:    opts.Prefetch || opts.PrefetchOnly,
	}
	if err := setConfig(spec, cfg); err != nil {
		return nil, err
	}
	if err := spec.Variables[IocorrVarLayout].Set(layoutBPF(lay)); err != nil {
		return nil, fmt.Errorf("setting layout: %w", err)
	}
	// Programs of paths not taken are not loaded: the kernel may not
	// know their helpers, hooks or attach types.
	for _, name := range append(programsNotTaken(caps), opts.unwanted()...) {
		delete(spec.Programs, name)
	}

	t := &Tracer{opts: opts, attached: map[fileID]bool{}, layout: lay, layoutFixed: opts.Layout != nil, opIndex: map[string]uint64{},
		pendingOps: map[uint32][]string{}, offsets: map[string]map[string]uint64{}, pads: map[string]map[string]int{}, emulated: map[string]map[string]bool{}, caps: caps}
	load := ebpf.CollectionOptions{Cache: d.types}
	coll, err := ebpf.NewCollectionWithOptions(spec, load)
	// An optional capability's program the verifier refuses makes that
	// capability NA, with the verifier's words, not the run impossible.
	for err != nil {
		drop := demoteRefused(t.caps, err)
		if len(drop) == 0 {
			break
		}
		for _, name := range drop {
			delete(spec.Programs, name)
		}
		// Without the page cache's programs nothing keeps runs: the
		// other programs' flushes are pruned, as in the default tier.
		pr, perr := opts.pageRecordsConst(caps)
		if perr != nil {
			return nil, perr
		}
		cfg.PageRecords = pr
		cfg.CountFaults = opts.countFaultsConst(caps)
		if perr := setConfig(spec, cfg); perr != nil {
			return nil, perr
		}
		coll, err = ebpf.NewCollectionWithOptions(spec, load)
	}
	if err != nil {
		// The verifier's refusals are EACCES too: they come first.
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading BPF programs: verifier: %+v", ve)
		}
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: %v", ErrPrivileges, err)
		}
		return nil, fmt.Errorf("loading BPF programs: %w", err)
	}
	if err := assignObjects(&t.objs, coll); err != nil {
		coll.Close()
		return nil, err
	}
	t.countFaults = cfg.CountFaults
	t.keepsRuns = cfg.PageRecords == uint32(PageRuns) || cfg.PageRecords == uint32(PageRunsAndFolios)
	for _, d := range opts.Devices {
		if err := t.AddDevice(d); err != nil {
			t.Close()
			return nil, err
		}
	}
	if err := t.attachKernel(); err != nil {
		t.Close()
		return nil, err
	}
	t.rd, err = newRing(t.objs.Events)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("opening ring buffer: %w", err)
	}
	return t, nil
}

// setConfig sets the programs' one settings struct (struct config
// of common.bpf.h) in spec.
func setConfig(spec *ebpf.CollectionSpec, cfg IocorrConfig) error {
	if err := spec.Variables[IocorrVarCfg].Set(cfg); err != nil {
		return fmt.Errorf("setting the BPF config: %w", err)
	}
	return nil
}

func (t *Tracer) addProbe(p Probe) {
	t.mu.Lock()
	t.probes = append(t.probes, p)
	t.mu.Unlock()
}

// TracePID adds a process to the traced set; the kernel follows its
// forks from then on.
func (t *Tracer) TracePID(pid int) error {
	var st IocorrProcState
	if err := t.objs.Traced.Update(uint32(pid), &st, ebpf.UpdateNoExist); err != nil && !errors.Is(err, ebpf.ErrKeyExist) {
		return fmt.Errorf("tracing pid %d: %w", pid, err)
	}
	return nil
}

// TracedProcesses lists the processes in the traced set: the kernel
// drops one when its last thread exits, so a recording lasts while the
// list is not empty (a descendant that outlived the command included).
func (t *Tracer) TracedProcesses() ([]int, error) {
	var pids []int
	var k uint32
	it := t.objs.Traced.Iterate()
	var st IocorrProcState
	for it.Next(&k, &st) {
		pids = append(pids, int(k))
	}
	if err := it.Err(); err != nil {
		return pids, fmt.Errorf("listing the traced processes: %w", err)
	}
	return pids, nil
}

// TraceForksOf traces every process that thread tid forks from now until
// stop is called, from the fork on: the child is in the traced set before
// it runs its first instruction, so every fault it takes is recorded, as
// its rusage counts them. The caller keeps its goroutine on that thread
// (runtime.LockOSThread) while it forks.
func (t *Tracer) TraceForksOf(tid int) (stop func() error, err error) {
	key := uint32(tid)
	if err := t.objs.Forkers.Update(key, uint8(1), ebpf.UpdateNoExist); err != nil {
		return nil, fmt.Errorf("tracing the children of thread %d: %w", tid, err)
	}
	return func() error {
		if err := t.objs.Forkers.Delete(key); err != nil {
			return fmt.Errorf("no longer tracing the children of thread %d: %w", tid, err)
		}
		return nil
	}, nil
}

// AddFile marks a model file: its page-cache and readahead events are
// kept whoever causes them. dev is the kernel's encoding (major<<20|minor).
func (t *Tracer) AddFile(dev uint32, ino uint64) error {
	k := IocorrFileKey{Ino: ino, Dev: dev}
	if err := t.objs.Files.Update(&k, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("adding model file %s ino %d: %w", kernel.DevString(dev), ino, err)
	}
	return nil
}

// RemoveFile stops keeping a model file's page-cache and readahead
// events, whoever causes them: a recording's end, where the pending
// page-cache runs are flushed, is then one cut for every record of the
// file, and reclaim of its pages after it is in no record. A file not
// kept is no error.
func (t *Tracer) RemoveFile(dev uint32, ino uint64) error {
	k := IocorrFileKey{Ino: ino, Dev: dev}
	if err := t.objs.Files.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("removing model file %s ino %d: %w", kernel.DevString(dev), ino, err)
	}
	return nil
}

// AddDevice keeps block events of a whole-disk device when the tracer
// filters by device (Options.Devices).
func (t *Tracer) AddDevice(dev uint32) error {
	if err := t.objs.Devs.Update(dev, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("adding block device %s: %w", kernel.DevString(dev), err)
	}
	return nil
}

// RingBuf is the reader of the events ring buffer. Producers wake the
// reader only for urgent events, an armed token start or when much data
// is pending, so the reader must also look on a deadline (Ring.Wait,
// ringbuf.Reader.SetDeadline).
func (t *Tracer) RingBuf() *Ring { return t.rd }

// Probes lists what was attached, and what failed, so far.
func (t *Tracer) Probes() []Probe {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Probe(nil), t.probes...)
}

// Lost reports, per event type name, the events the kernel dropped because
// the ring buffer was full. Every type is present, zero or not.
func (t *Tracer) Lost() (map[string]uint64, error) {
	out := make(map[string]uint64, wire.EventTypeCount)
	for typ := uint32(1); typ < wire.EventTypeCount; typ++ {
		n, err := perCPUSum(t.objs.Lost, typ)
		if err != nil {
			return nil, fmt.Errorf("reading lost-event counters: %w", err)
		}
		out[wire.EventTypeName(typ)] = n
	}
	return out, nil
}

// perCPUSum is a per-CPU array counter's value summed over every CPU.
func perCPUSum(m *ebpf.Map, key uint32) (uint64, error) {
	var per []uint64
	if err := m.Lookup(key, &per); err != nil {
		return 0, err
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}

// UnorderedPageRuns reports the page-cache runs that a page event of the
// same pages could not flush ahead of itself, because their CPU published
// a newer run in the slot at each of the flush's tries: they are recorded,
// not lost, but may follow that event in the ring (the store orders each
// chunk by time).
func (t *Tracer) UnorderedPageRuns() (uint64, error) {
	n, err := perCPUSum(t.objs.RunsUnordered, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the unordered page-run counter: %w", err)
	}
	return n, nil
}

// KeepsPageRuns says whether the kernel keeps page-cache runs pending
// (the pagecache tier, where runs are its records): elsewhere a flush
// has nothing to put in the ring.
func (t *Tracer) KeepsPageRuns() bool { return t.keepsRuns }

// FlushPageRuns puts the page-cache runs still pending in the kernel into
// the ring buffer, where the loaded programs keep runs (KeepsPageRuns). The
// recorder calls it when the command has ended, before it reads the ring
// to its end; runs are also flushed at every token.
func (t *Tracer) FlushPageRuns() error {
	// A tier that keeps no runs has none pending: its flush would be one
	// program run for nothing.
	if !t.keepsRuns {
		return nil
	}
	if _, err := t.objs.FlushPageRuns.Run(&ebpf.RunOptions{}); err != nil {
		return fmt.Errorf("flushing pending page-cache runs: %w", err)
	}
	return nil
}

// PendingBlockRequests counts block requests seen issued whose completion
// never reached the tracer: they are missing from the record, and a run
// reports how many.
func (t *Tracer) PendingBlockRequests() (int, error) {
	var (
		k  uint64
		v  IocorrBlkStart
		n  int
		it = t.objs.BlkStarts.Iterate()
	)
	for it.Next(&k, &v) {
		n++
	}
	if err := it.Err(); err != nil {
		return n, fmt.Errorf("reading pending block requests: %w", err)
	}
	return n, nil
}

// BlockCompletionsUnseen counts the requests the kernel side recorded
// with their completion unseen, when their request was issued again.
func (t *Tracer) BlockCompletionsUnseen() (uint64, error) {
	n, err := perCPUSum(t.objs.BlkUnseen, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the count of block completions unseen: %w", err)
	}
	return n, nil
}

// BlockRequeues counts the requests taken back for a requeue while held
// as issued (block.bpf.h's block_requeue): each is counted once, at the
// completion of its last issue. Nil on the block capability's fallback
// path, which has no requeue hook.
func (t *Tracer) BlockRequeues() (*uint64, error) {
	if !t.usesPath(CapBlock, 0) {
		return nil, nil
	}
	n, err := perCPUSum(t.objs.BlkRequeues, 0)
	if err != nil {
		return nil, fmt.Errorf("reading the count of block requeues: %w", err)
	}
	return &n, nil
}

// TakeUnfinishedBlockRequests removes the block requests still held as
// issued and returns them as block events with their completion unseen,
// timed now (CLOCK_MONOTONIC ns, as bpf_ktime_get_ns): at a record's end
// they were read or written all the same, whether their completion is yet
// to come or never reached BPF.
func (t *Tracer) TakeUnfinishedBlockRequests(now uint64) ([]wire.BlockEvent, error) {
	var (
		k   uint64
		v   IocorrBlkStart
		all = map[uint64]IocorrBlkStart{}
		out []wire.BlockEvent
		it  = t.objs.BlkStarts.Iterate()
	)
	for it.Next(&k, &v) {
		all[k] = v
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading unfinished block requests: %w", err)
	}
	for k, v := range all {
		// One whose completion came meanwhile was recorded by BPF: it is
		// gone, and not taken twice.
		if err := t.objs.BlkStarts.Delete(k); errors.Is(err, ebpf.ErrKeyNotExist) {
			continue
		} else if err != nil {
			return nil, fmt.Errorf("removing an unfinished block request: %w", err)
		}
		unseen := wire.BlockCompletionBLOCK_COMPLETION_UNSEEN
		e := wire.BlockEvent{Hdr: *startHdr(&v), IssueTs: v.Hdr.Ts, Sector: v.Sector, Dev: v.Dev, Bytes: v.Bytes, CmdFlags: v.CmdFlags,
			Error: int32(unseen)}
		e.Hdr.Ts = max(now, v.Hdr.Ts)
		out = append(out, e)
	}
	// In issue order, as the ring would have had them.
	slices.SortFunc(out, func(a, b wire.BlockEvent) int { return cmp.Compare(a.IssueTs, b.IssueTs) })
	return out, nil
}

// startHdr is the stamp of an issued block request: iocorr.h's struct
// event_hdr, which bpf2go writes into IocorrBlkStart as an anonymous
// struct of the same layout (TestTheLoaderTypesHoldTheWireHeader).
func startHdr(s *IocorrBlkStart) *wire.EventHdr { return (*wire.EventHdr)(unsafe.Pointer(&s.Hdr)) }

// OpFuncs maps an op event's fn (the uprobe cookie) to its symbol.
func (t *Tracer) OpFuncs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.opFuncs...)
}

// Close detaches everything and frees the programs and maps.
func (t *Tracer) Close() error {
	var errs []error
	if t.rd != nil {
		errs = append(errs, t.rd.Close())
	}
	var detach []io.Closer
	for _, pe := range t.perf {
		detach = append(detach, pe)
	}
	for _, l := range t.links {
		detach = append(detach, l)
	}
	t.mu.Lock()
	for _, l := range t.layoutLinks {
		detach = append(detach, l)
	}
	t.layoutLinks = nil
	t.mu.Unlock()
	errs = append(errs, closeAll(detach))
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}

// closeAll closes every closer at once. Detaching a probe waits for RCU
// grace periods (unregistering a uprobe or a perf event synchronizes):
// one after another, the ~40 links of a run took 1.3 s to close on this
// VM, the whole of `record -- true`'s wait after its command had exited.
// Closed together, they wait for the same grace periods. With the ring
// reader closed first, the order no longer matters: nothing reads what a
// probe still writes.
func closeAll(cs []io.Closer) error {
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Go(func() { errs[i] = c.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
