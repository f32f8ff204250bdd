package bpf

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/internal/kernel"
)

// Options select what the tracer records.
type Options struct {
	// ProbeOps attaches a uprobe to every exported ggml_compute_forward_*
	// function for per-op timing. It costs one uprobe hit per op per
	// compute thread, so it is off by default.
	ProbeOps bool
	// ProbeSched attaches to sched_switch and sched_wakeup for the thread
	// states of traced threads: every context switch of the machine pays
	// the program's tgid test, so it is off by default.
	ProbeSched bool
	// RingBufBytes sizes the ring buffer (a power of two, at least a
	// page); 0 means DefaultRingBufBytes.
	RingBufBytes int
	// PageRecords says how page-cache adds and deletions are recorded:
	// coalesced into EV_PAGE_RUN records (the default), or one EV_PAGE_ADD
	// or EV_PAGE_DEL per folio as the kernel reports them, or both side by
	// side (to check the runs against the folios of the same events).
	PageRecords PageRecords
	// SelfPID is filtered out of block events (iocorr's own writes).
	SelfPID int
	// Devices, when not empty, limits block events to these whole-disk
	// devices (kernel dev_t encoding). Empty keeps every device.
	Devices []uint32
	// Layout overrides the built-in ggml struct layout (from DWARF).
	Layout *ggml.Layout
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
}

// Tracer owns the loaded BPF objects and their attachments.
type Tracer struct {
	objs  IocorrObjects
	opts  Options
	links []link.Link
	perf  []*perfEvent
	rd    *ringbuf.Reader

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
	// layoutLinks are the probes that read ggml structs with the layout
	// (graphs, expert picks, ops); DisableLayoutProbes closes them and
	// sets layoutOff, after which such probes are not kept.
	layoutLinks []link.Link
	layoutOff   bool
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

	spec, err := LoadIocorr()
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
	// RUN_SLOTS of pagecache.bpf.h, runWays per CPU; CPUs beyond share slots.
	runSlots := int(spec.Variables["runs"].Size()) / int(unsafe.Sizeof(IocorrPageRun{}))
	consts := map[string]any{
		"self_tgid":    uint32(opts.SelfPID),
		"probe_ops":    opts.ProbeOps,
		"filter_devs":  len(opts.Devices) > 0,
		"layout":       layoutBPF(lay),
		"page_shift":   uint32(bits.TrailingZeros(uint(os.Getpagesize()))),
		"page_records": uint32(opts.PageRecords),
		// Slots beyond the CPUs would never be used: flushes scan only these.
		"run_slots": uint32(min(runWays*cpus, runSlots)),
	}
	for name, v := range consts {
		vs, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("BPF object has no variable %s", name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("setting %s: %w", name, err)
		}
	}

	t := &Tracer{opts: opts, attached: map[fileID]bool{}, layout: lay, layoutFixed: opts.Layout != nil, opIndex: map[string]uint64{},
		pendingOps: map[uint32][]string{}}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("%w: %v", ErrPrivileges, err)
		}
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("loading BPF programs: verifier: %+v", ve)
		}
		return nil, fmt.Errorf("loading BPF programs: %w", err)
	}
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
	if opts.ProbeSched {
		for _, p := range []struct {
			name string
			prog *ebpf.Program
		}{{"sched_switch", t.objs.SchedSwitch}, {"sched_wakeup", t.objs.SchedWakeup}} {
			l, err := link.AttachTracing(link.TracingOptions{Program: p.prog})
			if err != nil {
				t.addProbe(Probe{Kind: "tp_btf", Target: p.name, Error: err.Error()})
				t.Close()
				return nil, fmt.Errorf("attaching tp_btf %s: %w", p.name, err)
			}
			t.links = append(t.links, l)
			t.addProbe(Probe{Kind: "tp_btf", Target: p.name})
		}
	}
	t.rd, err = ringbuf.NewReader(t.objs.Events)
	if err != nil {
		t.Close()
		return nil, fmt.Errorf("opening ring buffer: %w", err)
	}
	return t, nil
}

// kernelProbes are attached for every run; a missing one is an error,
// since a run without it would report silent zeros.
var kernelProbes = []struct {
	kind, group, name string
	prog              func(*IocorrPrograms) *ebpf.Program
}{
	{"tp_btf", "", "page_fault_user", func(p *IocorrPrograms) *ebpf.Program { return p.FaultBegin }},
	{"tracepoint", "filemap", "mm_filemap_add_to_page_cache", func(p *IocorrPrograms) *ebpf.Program { return p.PageAdd }},
	{"tracepoint", "filemap", "mm_filemap_delete_from_page_cache", func(p *IocorrPrograms) *ebpf.Program { return p.PageDel }},
	{"tracepoint", "filemap", "mm_filemap_fault", func(p *IocorrPrograms) *ebpf.Program { return p.FilemapFault }},
	{"tracepoint", "readahead", "page_cache_sync_ra", func(p *IocorrPrograms) *ebpf.Program { return p.RaSync }},
	{"tracepoint", "readahead", "page_cache_async_ra", func(p *IocorrPrograms) *ebpf.Program { return p.RaAsync }},
	{"tracepoint", "readahead", "page_cache_ra_unbounded", func(p *IocorrPrograms) *ebpf.Program { return p.RaUnbounded }},
	{"tracepoint", "readahead", "page_cache_ra_order", func(p *IocorrPrograms) *ebpf.Program { return p.RaOrder }},
	{"tp_btf", "", "block_rq_issue", func(p *IocorrPrograms) *ebpf.Program { return p.BlockIssue }},
	{"tp_btf", "", "block_rq_complete", func(p *IocorrPrograms) *ebpf.Program { return p.BlockComplete }},
	{"tp_btf", "", "sched_process_fork", func(p *IocorrPrograms) *ebpf.Program { return p.ProcFork }},
	{"tp_btf", "", "sched_process_exec", func(p *IocorrPrograms) *ebpf.Program { return p.ProcExec }},
	{"tp_btf", "", "sched_process_exit", func(p *IocorrPrograms) *ebpf.Program { return p.ProcExit }},
	{"tracepoint", "syscalls", "sys_exit_mmap", func(p *IocorrPrograms) *ebpf.Program { return p.MmapExit }},
	// Calls that change mappings invalidate the fault path's VMA cache.
	{"tracepoint", "syscalls", "sys_enter_mmap", func(p *IocorrPrograms) *ebpf.Program { return p.VmaEnterMmap }},
	{"tracepoint", "syscalls", "sys_enter_munmap", func(p *IocorrPrograms) *ebpf.Program { return p.VmaEnterMunmap }},
	{"tracepoint", "syscalls", "sys_exit_munmap", func(p *IocorrPrograms) *ebpf.Program { return p.VmaExitMunmap }},
	{"tracepoint", "syscalls", "sys_enter_mremap", func(p *IocorrPrograms) *ebpf.Program { return p.VmaEnterMremap }},
	{"tracepoint", "syscalls", "sys_exit_mremap", func(p *IocorrPrograms) *ebpf.Program { return p.VmaExitMremap }},
	{"tracepoint", "syscalls", "sys_enter_brk", func(p *IocorrPrograms) *ebpf.Program { return p.VmaEnterBrk }},
	{"tracepoint", "syscalls", "sys_exit_brk", func(p *IocorrPrograms) *ebpf.Program { return p.VmaExitBrk }},
	{"tracepoint", "syscalls", "sys_enter_shmat", func(p *IocorrPrograms) *ebpf.Program { return p.VmaEnterShmat }},
	{"tracepoint", "syscalls", "sys_exit_shmat", func(p *IocorrPrograms) *ebpf.Program { return p.VmaExitShmat }},
	{"tracepoint", "syscalls", "sys_enter_shmdt", func(p *IocorrPrograms) *ebpf.Program { return p.VmaEnterShmdt }},
	{"tracepoint", "syscalls", "sys_exit_shmdt", func(p *IocorrPrograms) *ebpf.Program { return p.VmaExitShmdt }},
	{"tracepoint", "syscalls", "sys_enter_remap_file_pages", func(p *IocorrPrograms) *ebpf.Program { return p.VmaEnterRemap }},
	{"tracepoint", "syscalls", "sys_exit_remap_file_pages", func(p *IocorrPrograms) *ebpf.Program { return p.VmaExitRemap }},
	{"tracepoint", "syscalls", "sys_enter_read", func(p *IocorrPrograms) *ebpf.Program { return p.ReadEnterRead }},
	{"tracepoint", "syscalls", "sys_exit_read", func(p *IocorrPrograms) *ebpf.Program { return p.ReadExitRead }},
	{"tracepoint", "syscalls", "sys_enter_pread64", func(p *IocorrPrograms) *ebpf.Program { return p.ReadEnterPread64 }},
	{"tracepoint", "syscalls", "sys_exit_pread64", func(p *IocorrPrograms) *ebpf.Program { return p.ReadExitPread64 }},
	{"tracepoint", "syscalls", "sys_enter_readv", func(p *IocorrPrograms) *ebpf.Program { return p.ReadEnterReadv }},
	{"tracepoint", "syscalls", "sys_exit_readv", func(p *IocorrPrograms) *ebpf.Program { return p.ReadExitReadv }},
	{"tracepoint", "syscalls", "sys_enter_preadv", func(p *IocorrPrograms) *ebpf.Program { return p.ReadEnterPreadv }},
	{"tracepoint", "syscalls", "sys_exit_preadv", func(p *IocorrPrograms) *ebpf.Program { return p.ReadExitPreadv }},
	{"tracepoint", "syscalls", "sys_enter_preadv2", func(p *IocorrPrograms) *ebpf.Program { return p.ReadEnterPreadv2 }},
	{"tracepoint", "syscalls", "sys_exit_preadv2", func(p *IocorrPrograms) *ebpf.Program { return p.ReadExitPreadv2 }},
}

// optionalKernelProbes are attached when the kernel has them; a run
// without one says so (its Probe carries the error) instead of failing.
var optionalKernelProbes = []struct {
	name, without string
	prog          func(*IocorrPrograms) *ebpf.Program
}{
	{"io_uring_submit_req", "io_uring reads are not traced", func(p *IocorrPrograms) *ebpf.Program { return p.UringSubmit }},
	{"io_uring_complete", "io_uring reads are not traced", func(p *IocorrPrograms) *ebpf.Program { return p.UringComplete }},
}

func (t *Tracer) attachKernel() error {
	for _, kp := range kernelProbes {
		var (
			l   link.Link
			err error
		)
		prog := kp.prog(&t.objs.IocorrPrograms)
		target := kp.name
		if kp.kind == "tp_btf" {
			l, err = link.AttachTracing(link.TracingOptions{Program: prog})
		} else {
			target = kp.group + "/" + kp.name
			l, err = link.Tracepoint(kp.group, kp.name, prog, nil)
		}
		if err != nil {
			t.addProbe(Probe{Kind: kp.kind, Target: target, Error: err.Error()})
			return fmt.Errorf("attaching %s %s: %w", kp.kind, target, err)
		}
		t.links = append(t.links, l)
		t.addProbe(Probe{Kind: kp.kind, Target: target})
	}
	for _, op := range optionalKernelProbes {
		l, err := link.AttachTracing(link.TracingOptions{Program: op.prog(&t.objs.IocorrPrograms)})
		if err != nil {
			t.addProbe(Probe{Kind: "tp_btf", Target: op.name, Error: op.without + ": " + err.Error()})
			continue
		}
		t.links = append(t.links, l)
		t.addProbe(Probe{Kind: "tp_btf", Target: op.name})
	}
	for _, pf := range []struct {
		config uint64
		name   string
		prog   *ebpf.Program
	}{
		{unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ, "page-faults-major", t.objs.FaultMajor},
		{unix.PERF_COUNT_SW_PAGE_FAULTS_MIN, "page-faults-minor", t.objs.FaultMinor},
	} {
		for cpu := 0; cpu < runtime.NumCPU(); cpu++ {
			pe, err := openSoftwareEvent(pf.config, cpu, pf.prog)
			if err != nil {
				t.addProbe(Probe{Kind: "perf_event", Target: pf.name, Error: err.Error()})
				return fmt.Errorf("attaching perf event %s on cpu %d: %w", pf.name, cpu, err)
			}
			t.perf = append(t.perf, pe)
		}
		t.addProbe(Probe{Kind: "perf_event", Target: pf.name})
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

// AddDevice keeps block events of a whole-disk device when the tracer
// filters by device (Options.Devices).
func (t *Tracer) AddDevice(dev uint32) error {
	if err := t.objs.Devs.Update(dev, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("adding block device %s: %w", kernel.DevString(dev), err)
	}
	return nil
}

// RingBuf is the reader of the events ring buffer. Producers wake the
// reader only for urgent events or when much data is pending, so the
// reader must poll with a short deadline (ringbuf.Reader.SetDeadline).
func (t *Tracer) RingBuf() *ringbuf.Reader { return t.rd }

// Probes lists what was attached, and what failed, so far.
func (t *Tracer) Probes() []Probe {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Probe(nil), t.probes...)
}

// Lost reports, per event type name, the events the kernel dropped because
// the ring buffer was full. Every type is present, zero or not.
func (t *Tracer) Lost() (map[string]uint64, error) {
	out := make(map[string]uint64, EventTypeCount)
	for typ := uint32(1); typ < EventTypeCount; typ++ {
		var per []uint64
		if err := t.objs.Lost.Lookup(typ, &per); err != nil {
			return nil, fmt.Errorf("reading lost-event counters: %w", err)
		}
		var sum uint64
		for _, v := range per {
			sum += v
		}
		out[EventTypeName(typ)] = sum
	}
	return out, nil
}

// UnorderedPageRuns reports the page-cache runs that a page event of the
// same pages could not flush ahead of itself, because another CPU held the
// run's slot past the spin: they are recorded, not lost, but may follow
// that event in the ring (the store orders each chunk by time).
func (t *Tracer) UnorderedPageRuns() (uint64, error) {
	var per []uint64
	if err := t.objs.RunsUnordered.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("reading the unordered page-run counter: %w", err)
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}

// FlushPageRuns puts the page-cache runs still pending in the kernel into
// the ring buffer. The recorder calls it when the command has ended, before
// it reads the ring to its end; runs are also flushed at every token.
func (t *Tracer) FlushPageRuns() error {
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
	for _, pe := range t.perf {
		errs = append(errs, pe.Close())
	}
	for i := len(t.links) - 1; i >= 0; i-- {
		errs = append(errs, t.links[i].Close())
	}
	t.mu.Lock()
	for _, l := range t.layoutLinks {
		errs = append(errs, l.Close())
	}
	t.layoutLinks = nil
	t.mu.Unlock()
	errs = append(errs, t.objs.Close())
	return errors.Join(errs...)
}
