package bpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/tracefs"
	"github.com/iocorr/iocorr/rundir"
)

// WithoutEnv names the environment variable that makes the tracer behave
// as if kernel features were absent (a comma-separated list of feature
// names, see Features), so that every fallback can be exercised on a
// kernel that has the primary path. Options.Without adds to it; record,
// sweep and doctor all read it through Open and Detect.
const WithoutEnv = "IOCORR_WITHOUT"

// NeedKind says how a kernel feature is looked for.
type NeedKind string

const (
	// NeedTracepoint is a classic tracepoint, "group/name" under tracefs.
	NeedTracepoint NeedKind = "tracepoint"
	// NeedBTF is a tp_btf target: the kernel's BTF has btf_trace_<name>.
	NeedBTF NeedKind = "tp_btf"
	// NeedHelper is a BPF helper a tracing program may call.
	NeedHelper NeedKind = "helper"
	// NeedLink is a BPF link type.
	NeedLink NeedKind = "link"
	// NeedPerf is a software perf event with a BPF program on it.
	NeedPerf NeedKind = "perf_event"
	// NeedVerifier is something the verifier accepts (bounded loops).
	NeedVerifier NeedKind = "verifier"
)

// Need is one kernel feature a path needs. Name is what Options.Without
// and IOCORR_WITHOUT match: the name itself, or a prefix up to a "/"
// ("readahead" is every readahead tracepoint, "syscalls" every syscall).
type Need struct {
	Kind NeedKind
	Name string
	// perf is the software event's config (NeedPerf).
	perf uint64
	// helper is the helper's id (NeedHelper).
	helper asm.BuiltinFunc
}

func (n Need) String() string { return string(n.Kind) + " " + n.Name }

// matches says whether a feature name given to Without names this need.
func (n Need) matches(feature string) bool {
	return n.Name == feature || strings.HasPrefix(n.Name, feature+"/")
}

// attachment is one program attached by a path.
type attachment struct {
	prog string
	need Need // what it attaches to
}

// Path is one way the tracer provides a capability.
type Path struct {
	Name string
	// Kernel is the oldest mainline kernel with every need of the path
	// (README's capability table gives the commits).
	Kernel string
	// Lost says what a run on this path does not have that the primary
	// path gives; "" for the primary path.
	Lost   string
	needs  []Need
	attach []attachment
	// progs are programs the path loads and attaches itself (per-CPU perf
	// events) or that other code attaches (op probes).
	progs []string
}

// Needs lists the kernel features the path needs.
func (p *Path) Needs() []Need {
	out := slices.Clone(p.needs)
	for _, a := range p.attach {
		if !slices.Contains(out, a.need) {
			out = append(out, a.need)
		}
	}
	return out
}

// programs are the BPF programs the path loads.
func (p *Path) programs() []string {
	out := slices.Clone(p.progs)
	for _, a := range p.attach {
		out = append(out, a.prog)
	}
	return out
}

// Capability is one thing iocorr measures, with its paths in order of
// preference: the first whose needs this kernel meets is taken.
type Capability struct {
	Name string
	// What the capability gives a run.
	What  string
	Paths []Path
	// NA says what a run without any path cannot tell (its figures are NA
	// with this reason, never zeros).
	NA string
	// Required capabilities stop a run from starting when no path is
	// left: without them nothing else can be attributed.
	Required bool
	// Option is set for capabilities a run asks for (--probe sched); the
	// others are always wanted.
	Option string
	// RecordedBy names the capability whose programs record this one's
	// events: when that one has no path, this one has nothing to record
	// either, whatever its own path (its programs only keep state for
	// the others).
	RecordedBy string
}

// Capability names.
const (
	CapLoops     = "loops"
	CapProcesses = "processes"
	CapMappings  = "mappings"
	CapFaults    = "faults"
	CapOffsets   = "fault offsets"
	CapFaultWait = "fault wait"
	CapPageCache = "page cache"
	CapReadahead = "readahead trigger"
	CapBlock     = "block I/O"
	CapReads     = "read calls"
	CapIOUring   = "io_uring"
	CapOps       = "op probes"
	CapSched     = "sched"
)

func tp(group, name string) Need        { return Need{Kind: NeedTracepoint, Name: group + "/" + name} }
func tpBTF(name string) Need            { return Need{Kind: NeedBTF, Name: name} }
func on(prog string, n Need) attachment { return attachment{prog: prog, need: n} }

var (
	needFindVma     = Need{Kind: NeedHelper, Name: "bpf_find_vma", helper: asm.FnFindVma}
	needLoop        = Need{Kind: NeedHelper, Name: "bpf_loop", helper: asm.FnLoop}
	needDynptr      = Need{Kind: NeedHelper, Name: "bpf_ringbuf_reserve_dynptr", helper: asm.FnRingbufReserveDynptr}
	needBounded     = Need{Kind: NeedVerifier, Name: "bounded_loops"}
	needCookie      = Need{Kind: NeedHelper, Name: "bpf_get_attach_cookie", helper: asm.FnGetAttachCookie}
	needUprobeMulti = Need{Kind: NeedLink, Name: "uprobe_multi"}
	needPerfFaults  = Need{Kind: NeedPerf, Name: "page-faults", perf: unix.PERF_COUNT_SW_PAGE_FAULTS}
	needPerfMajor   = Need{Kind: NeedPerf, Name: "page-faults-major", perf: unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ}
	needPerfMinor   = Need{Kind: NeedPerf, Name: "page-faults-minor", perf: unix.PERF_COUNT_SW_PAGE_FAULTS_MIN}
)

// syscallPair attaches an enter and an exit program of one syscall.
func syscallPair(enter, exit, call string) []attachment {
	return []attachment{on(enter, tp("syscalls", "sys_enter_"+call)), on(exit, tp("syscalls", "sys_exit_"+call))}
}

// Capabilities is the one table of what the tracer can record, how, and
// on which kernels: the tracer loads what it chooses from it, and doctor,
// meta.json and the summary print it.
var Capabilities = []Capability{
	{
		Name: CapLoops, What: "loops in the kernel programs: page-cache runs and their flushes, graph walks, expert picks", Required: true,
		NA: "nothing can be traced",
		Paths: []Path{
			// The page-cache runs also reserve their ring records as
			// dynptrs (a run is copied in before its slot is given up,
			// pagecache.bpf.h's run__take): 5.19 (bc34dee65a65). A
			// 5.17 or 5.18 kernel takes the bounded loops whole rather
			// than a third path for two releases.
			{Name: "bpf_loop, ring-buffer dynptrs", Kernel: "5.19", needs: []Need{needLoop, needDynptr}},
			{
				// Every bpf_loop call is behind cfg.use_bpf_loop; the per-folio
				// page-cache path has none, and the graph walk and the
				// expert picks loop a compile-time number of times
				// (ggml.bpf.h's GRAPH_WALK_BOUND, EXPERT_CHUNK_BOUND),
				// calling a global function with a pointer argument:
				// bounded loops are 5.3 (2589726d12a1), pointers into
				// global functions 5.12 or 5.13 (e5069b9c23b3, February
				// 2021), so the path's kernel is the later.
				Name: fmt.Sprintf("bounded loops: graphs walked %d nodes per computation, expert ids read %d events per MoE node, the page cache one record per folio", GraphWalkBound, ExpertChunkBound), Kernel: "5.13",
				Lost:  fmt.Sprintf("a graph of more than %d nodes is walked over its next computations (nodes never walked are counted in meta.json's loops_cut); expert-id rows past %d events of %d ids per MoE node are not read (counted there too, and the picks are then NA); page-cache events are one record per folio (more records, the same figures)", GraphWalkBound, ExpertChunkBound, maxExpertIDs),
				needs: []Need{needBounded},
			},
		},
	},
	{
		Name: CapProcesses, What: "the traced processes, from their fork on; every event's token stamp", Required: true,
		NA: "nothing can be traced",
		Paths: []Path{{
			Name: "tp_btf sched_process_fork/exec/exit", Kernel: "5.8",
			attach: []attachment{
				on("proc_fork", tpBTF("sched_process_fork")),
				on("proc_exec", tpBTF("sched_process_exec")),
				on("proc_exit", tpBTF("sched_process_exit")),
			},
		}},
	},
	{
		Name: CapMappings, What: "the files traced processes map and unmap (libraries dlopen'ed later are probed before they run)", Required: true,
		NA: "libraries and models mapped during the run are not seen",
		Paths: []Path{
			{
				// The call is kept at its entry here too: bpf_find_vma only
				// try-locks the mmap lock, and where another thread holds
				// it the call's own range stands in (vma.bpf.h).
				Name: "sys_exit_mmap, mapping from bpf_find_vma (the call's range where its lock is held); sys_exit_munmap", Kernel: "5.17",
				needs:  []Need{needFindVma},
				attach: slices.Concat(syscallPair("vma_enter_mmap", "mmap_exit", "mmap"), syscallPair("vma_enter_munmap", "vma_exit_munmap", "munmap")),
			},
			{
				Name: "sys_enter/exit_mmap, file from the fd; sys_exit_munmap", Kernel: "5.8",
				Lost:   "nothing (the mapping is the call's own range)",
				attach: slices.Concat(syscallPair("vma_enter_mmap", "mmap_exit", "mmap"), syscallPair("vma_enter_munmap", "vma_exit_munmap", "munmap")),
			},
		},
	},
	{
		Name: CapFaults, What: "user page faults: count, major/minor class, stall",
		NA: "no user page fault is seen: faults, major faults and fault stall are NA",
		Paths: []Path{
			{
				Name: "tp_btf page_fault_user + perf page-faults-major/-minor", Kernel: "5.8",
				attach: []attachment{on("fault_begin", tpBTF("page_fault_user"))},
				needs:  []Need{needPerfMajor, needPerfMinor},
				progs:  []string{"fault_major", "fault_minor"},
			},
			{
				Name: "perf page-faults (start, sample address) + page-faults-major/-minor", Kernel: "5.8",
				Lost:  "the fault's error code (the fault and its stall are the same)",
				needs: []Need{needPerfFaults, needPerfMajor, needPerfMinor},
				progs: []string{"fault_begin_perf", "fault_major", "fault_minor"},
			},
		},
	},
	{
		Name: CapOffsets, What: "each fault's file and offset",
		NA: "faults are not charged to tensors",
		// The fault programs resolve the mapping (or ingest does, from
		// the faults' addresses); this path's programs only keep the
		// fault programs' VMA cache fresh, with CapMappings' mmap and
		// munmap programs (required, so always on).
		RecordedBy: CapFaults,
		Paths: []Path{
			{
				Name: "bpf_find_vma at the fault, behind a VMA cache", Kernel: "5.17",
				needs: []Need{needFindVma},
				attach: slices.Concat(
					syscallPair("vma_enter_mremap", "vma_exit_mremap", "mremap"),
					syscallPair("vma_enter_brk", "vma_exit_brk", "brk"),
					syscallPair("vma_enter_shmat", "vma_exit_shmat", "shmat"),
					syscallPair("vma_enter_shmdt", "vma_exit_shmdt", "shmdt"),
					syscallPair("vma_enter_remap", "vma_exit_remap", "remap_file_pages"),
				),
			},
			{
				Name: "/proc/PID/maps snapshots and mmap calls, at ingest", Kernel: "5.8",
				Lost: "a mapping changed without mmap or munmap (mremap, shmat) is seen as the last mmap call or snapshot had it; a fault in a mapping made before the first snapshot and not by mmap (the program's own executable) is [anonymous]",
			},
		},
	},
	{
		Name: CapFaultWait, What: "the time each fault's thread slept off the CPU (its wait: what a prefetch can take off the token; the rest of the stall is the kernel's work)",
		NA: "the faults' wait is NA: the I/O shape's verdict judges their whole stall, the kernel's work in them included",
		// The wait is kept in the fault programs' starts and sent in
		// their records.
		RecordedBy: CapFaults,
		Paths: []Path{{
			// The three arguments read are the tracepoint's since
			// 2.6.35 and tp_btf's since 5.5; 5.8 is the floor of the
			// rest.
			Name: "tp_btf sched_switch, paired with each fault's start", Kernel: "5.8",
			attach: []attachment{on("fault_switch", tpBTF("sched_switch"))},
		}},
	},
	{
		Name: CapPageCache, What: "page-cache fills and evictions of model files", Option: "--probe pagecache",
		NA: "pages added and evicted are NA",
		Paths: []Path{
			{
				Name: "tracepoints filemap/mm_filemap_{add_to,delete_from}_page_cache and mm_filemap_fault", Kernel: "6.12",
				attach: []attachment{
					on("page_add", tp("filemap", "mm_filemap_add_to_page_cache")),
					on("page_del", tp("filemap", "mm_filemap_delete_from_page_cache")),
					on("filemap_fault", tp("filemap", "mm_filemap_fault")),
				},
			},
			{
				// mm_filemap_fault came in 6.12 (b6273b55d885); no
				// figure is computed from its records (correlate
				// skips them).
				Name: "tracepoints filemap/mm_filemap_{add_to,delete_from}_page_cache", Kernel: "5.8",
				Lost: "the filemap fault records in the spool; every figure is the same",
				attach: []attachment{
					on("page_add", tp("filemap", "mm_filemap_add_to_page_cache")),
					on("page_del", tp("filemap", "mm_filemap_delete_from_page_cache")),
				},
			},
		},
	},
	{
		Name: CapReadahead, What: "what each fault made the kernel read ahead (readahead_trigger_bytes), and the readahead windows", Option: "--probe pagecache",
		NA: "readahead_trigger_bytes is NA",
		// The trigger is the page cache's adds inside a fault.
		RecordedBy: CapPageCache,
		Paths: []Path{
			{
				Name: "page-cache adds inside each fault, and tracepoints readahead/page_cache_*", Kernel: "6.18",
				needs: []Need{tp("filemap", "mm_filemap_add_to_page_cache")},
				attach: []attachment{
					on("ra_sync", tp("readahead", "page_cache_sync_ra")),
					on("ra_async", tp("readahead", "page_cache_async_ra")),
					on("ra_unbounded", tp("readahead", "page_cache_ra_unbounded")),
					on("ra_order", tp("readahead", "page_cache_ra_order")),
				},
			},
			{
				// The trigger figure never came from the readahead
				// tracepoints: correlate charges the adds a thread makes
				// inside its fault to the faulting tensor.
				Name: "page-cache adds inside each fault", Kernel: "5.8",
				Lost:  "the readahead window records (sync/async kind, size, async size) in the spool; readahead_trigger_bytes is the same",
				needs: []Need{tp("filemap", "mm_filemap_add_to_page_cache")},
			},
		},
	},
	{
		Name: CapBlock, What: "block requests with their latency, charged to tensors through FIEMAP",
		NA: "device bytes read and block requests are NA",
		Paths: []Path{
			{
				// block_rq_requeue(struct request *) is 5.11's
				// (a54895fa057c took the queue argument out).
				Name: "tp_btf block_rq_issue/requeue/complete", Kernel: "5.11",
				attach: []attachment{
					on("block_issue", tpBTF("block_rq_issue")),
					on("block_requeue", tpBTF("block_rq_requeue")),
					on("block_complete", tpBTF("block_rq_complete")),
				},
			},
			{
				Name: "tp_btf block_rq_issue/complete", Kernel: "5.8",
				Lost: "requeues: a request issued again at the same sector and size is taken for a requeue, and one the scheduler grew meanwhile is counted twice (once as a completion unseen)",
				attach: []attachment{
					on("block_issue", tpBTF("block_rq_issue")),
					on("block_complete", tpBTF("block_rq_complete")),
				},
			},
		},
	},
	{
		Name: CapReads, What: "read calls of model files (read, pread64, readv, preadv, preadv2)",
		NA: "bytes requested by read calls are NA",
		Paths: []Path{{
			Name: "syscall tracepoints", Kernel: "5.8",
			attach: slices.Concat(
				syscallPair("read_enter_read", "read_exit_read", "read"),
				syscallPair("read_enter_pread64", "read_exit_pread64", "pread64"),
				syscallPair("read_enter_readv", "read_exit_readv", "readv"),
				syscallPair("read_enter_preadv", "read_exit_preadv", "preadv"),
				syscallPair("read_enter_preadv2", "read_exit_preadv2", "preadv2"),
			),
		}},
	},
	{
		Name: CapIOUring, What: "io_uring reads of model files",
		NA: "io_uring reads are not traced",
		Paths: []Path{{
			// io_uring_submit_req is io_uring_submit_sqe renamed in 6.4
			// (2ad57931db64); the older name is not attached.
			Name: "tp_btf io_uring_submit_req/complete", Kernel: "6.4",
			attach: []attachment{
				on("uring_submit", tpBTF("io_uring_submit_req")),
				on("uring_complete", tpBTF("io_uring_complete")),
			},
		}},
	},
	{
		Name: CapOps, What: "per-op probes (--probe ops)", Option: "--probe ops",
		NA: "ops are not probed: per-op figures are NA",
		Paths: []Path{
			{Name: "one uprobe_multi link per file", Kernel: "6.6", needs: []Need{needUprobeMulti, needCookie},
				// A build whose one op function is the dispatcher gets a plain uprobe.
				progs: []string{"op_begin_multi", "op_begin"}},
			{Name: "one uprobe per op function", Kernel: "5.15", Lost: "nothing measured: attaching takes one perf link per function", needs: []Need{needCookie}, progs: []string{"op_begin"}},
		},
	},
	{
		Name: CapSched, What: "thread states of traced threads (--probe sched)", Option: "--probe sched",
		NA: "thread states are not recorded",
		Paths: []Path{{
			// sched_switch's prev_state argument is 5.18's
			// (fa2c3254d7cf, 5.18-rc1): before it the verifier refuses the
			// program's read of it.
			Name: "tp_btf sched_switch/sched_wakeup", Kernel: "5.18",
			attach: []attachment{
				on("sched_switch", tpBTF("sched_switch")),
				on("sched_wakeup", tpBTF("sched_wakeup")),
			},
		}},
	},
}

// Features lists every feature name Without accepts.
func Features() []string {
	var out []string
	for _, c := range Capabilities {
		for i := range c.Paths {
			for _, n := range c.Paths[i].Needs() {
				if !slices.Contains(out, n.Name) {
					out = append(out, n.Name)
				}
				if g, _, ok := strings.Cut(n.Name, "/"); ok && !slices.Contains(out, g) {
					out = append(out, g)
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// CapStatus is the path chosen for one capability on this machine.
type CapStatus struct {
	Name string
	What string
	// Path is the path taken; "" when the capability is NA (or off).
	Path string
	// Kernel is the oldest kernel of the path taken (of the primary path
	// when none is).
	Kernel string
	// Primary is set when the path taken is the first one.
	Primary bool
	// Lost says what the run loses: against the primary path, or
	// everything (the NA reason) when no path was taken.
	Lost string
	// Why says why better paths were not taken: the features absent or
	// switched off, or the attach error.
	Why string
	// Off is set for an optional capability the run did not ask for.
	Off      bool
	Required bool
}

// NA reports whether the run has no path for the capability.
func (s CapStatus) NA() bool { return s.Path == "" }

// VerifierRefused begins the reason (Why) of a capability the tracer made
// NA at load because this kernel's verifier refused one of its programs
// (demoteRefused), followed by the program's name and the verifier's
// first line.
const VerifierRefused = "this kernel's verifier refused program "

// Refused reports whether the verifier took the capability away at load:
// Detect cannot foresee that (it loads nothing), so doctor passes and a
// run without a word would only show NA figures; record says it on stderr.
func (s CapStatus) Refused() bool { return s.NA() && strings.HasPrefix(s.Why, VerifierRefused) }

// capChoice is a capability's status and the path taken (nil: NA).
type capChoice struct {
	CapStatus
	cap  *Capability
	path *Path
}

// Detector answers whether this kernel has a feature. The zero value
// probes the running kernel; a feature in without is absent.
type detector struct {
	without []string
	// tracefs is the mounted tracefs ("" when none).
	tracefs string
	// types holds the kernel's BTF once read: the same cache loads the
	// programs (Open), so vmlinux's BTF is parsed once a run (~30 ms).
	types *btf.Cache
	memo  map[string]error
}

func newDetector(without []string) *detector {
	d := &detector{without: without, types: btf.NewCache(), memo: map[string]error{}}
	d.tracefs = tracefs.Dir()
	return d
}

var (
	errSwitchedOff = errors.New("switched off (" + WithoutEnv + ")")
	errNotInKernel = errors.New("not in this kernel")
)

// has returns nil when the kernel has the feature, else why not.
func (d *detector) has(n Need) error {
	for _, w := range d.without {
		if n.matches(w) {
			return errSwitchedOff
		}
	}
	key := n.String()
	if err, ok := d.memo[key]; ok {
		return err
	}
	err := d.probe(n)
	switch {
	// The kernel's "no" to a feature probe (cilium/ebpf's
	// ErrNotSupported) says only that.
	case errors.Is(err, ebpf.ErrNotSupported):
		err = errNotInKernel
	// A probe the process may not make says nothing of the kernel.
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		err = fmt.Errorf("%w: %v", ErrPrivileges, err)
	}
	d.memo[key] = err
	return err
}

func (d *detector) probe(n Need) error {
	switch n.Kind {
	case NeedTracepoint:
		if d.tracefs == "" {
			return errors.New("tracefs is not mounted (" + tracefs.Hint + ")")
		}
		if _, err := os.Stat(filepath.Join(d.tracefs, "events", n.Name)); err != nil {
			return errNotInKernel
		}
		return nil
	case NeedBTF:
		kbtf, err := d.types.Kernel()
		if err != nil {
			return fmt.Errorf("no kernel BTF: %w", err)
		}
		var td *btf.Typedef
		if err := kbtf.TypeByName("btf_trace_"+n.Name, &td); err != nil {
			return errNotInKernel
		}
		return nil
	case NeedHelper:
		return features.HaveProgramHelper(ebpf.TracePoint, n.helper)
	case NeedVerifier:
		return features.HaveBoundedLoops()
	case NeedLink:
		return features.HaveBPFLinkUprobeMulti()
	case NeedPerf:
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: n.perf, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Sample: 1, Bits: unix.PerfBitDisabled}
		fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return fmt.Errorf("perf_event_open: %w", err)
		}
		unix.Close(fd)
		return nil
	}
	return fmt.Errorf("unknown kind of feature %q", n.Kind)
}

// unprivileged says whether a feature probe was refused for want of
// privileges rather than answered by the kernel.
func (d *detector) unprivileged() bool {
	for _, err := range d.memo {
		if errors.Is(err, ErrPrivileges) {
			return true
		}
	}
	return false
}

// parseWithout checks the feature names of Options.Without and of the
// environment and returns them together.
func parseWithout(opt []string) ([]string, error) {
	all := slices.Clone(opt)
	if env := os.Getenv(WithoutEnv); env != "" {
		all = append(all, strings.Split(env, ",")...)
	}
	known := Features()
	var out []string
	for _, w := range all {
		w = strings.TrimSpace(w)
		if w == "" {
			continue
		}
		if !slices.Contains(known, w) {
			return nil, fmt.Errorf("unknown kernel feature %q to run without (known: %s)", w, strings.Join(known, ", "))
		}
		out = append(out, w)
	}
	return out, nil
}

// choose takes, for every capability, the first path whose needs the
// kernel meets (per d). want says whether an optional capability was
// asked for.
func choose(d *detector, want func(*Capability) bool) []capChoice {
	out := make([]capChoice, len(Capabilities))
	for i := range Capabilities {
		c := &Capabilities[i]
		ch := capChoice{cap: c, CapStatus: CapStatus{Name: c.Name, What: c.What, Kernel: c.Paths[0].Kernel, Required: c.Required}}
		if !want(c) {
			ch.Off = true
			ch.Lost = "not asked for (" + c.Option + ")"
			out[i] = ch
			continue
		}
		var why []string
		for j := range c.Paths {
			p := &c.Paths[j]
			// Absent features, grouped by why: "a, b: not in this kernel".
			var reasons []string
			byReason := map[string][]string{}
			for _, n := range p.Needs() {
				if err := d.has(n); err != nil {
					r := err.Error()
					if _, ok := byReason[r]; !ok {
						reasons = append(reasons, r)
					}
					byReason[r] = append(byReason[r], n.String())
				}
			}
			var missing []string
			for _, r := range reasons {
				missing = append(missing, strings.Join(byReason[r], ", ")+": "+r)
			}
			if len(missing) == 0 {
				ch.path = p
				ch.Path, ch.Kernel, ch.Primary, ch.Lost = p.Name, p.Kernel, j == 0, p.Lost
				break
			}
			why = append(why, p.Name+" needs "+strings.Join(missing, "; "))
		}
		ch.Why = strings.Join(why, "; ")
		if ch.path == nil {
			ch.Lost = c.NA
		}
		out[i] = ch
	}
	demoteUnrecorded(out)
	return out
}

// demoteUnrecorded makes NA every optional capability still on a path
// whose RecordedBy capability has none, with that one's reason (so that a
// refusal's names the refused program), and returns the programs of the
// paths it left.
func demoteUnrecorded(caps []capChoice) []string {
	var out []string
	for i := range caps {
		c := &caps[i]
		if c.path == nil || c.Required || c.cap.RecordedBy == "" {
			continue
		}
		j := slices.IndexFunc(caps, func(o capChoice) bool { return o.Name == c.cap.RecordedBy })
		if j < 0 || caps[j].path != nil {
			continue
		}
		why := caps[j].Why
		if caps[j].Off {
			why = caps[j].Name + ": " + caps[j].Lost
		}
		out = append(out, c.path.programs()...)
		c.path = nil
		c.Path, c.Primary, c.Lost, c.Why = "", false, c.cap.NA, why
	}
	return out
}

// DetectOptions are what Detect needs of a run's options.
type DetectOptions struct {
	Probes  rundir.ProbeSet
	Without []string
}

var detectMu sync.Mutex

// Detect reports the path each capability would take on this kernel
// without loading anything (doctor's table); Open takes the same paths,
// and demotes one to NA when its attachment fails.
func Detect(o DetectOptions) ([]CapStatus, error) {
	without, err := parseWithout(o.Without)
	if err != nil {
		return nil, err
	}
	detectMu.Lock()
	defer detectMu.Unlock()
	opts := Options{Probes: o.Probes}
	chs := choose(newDetector(without), opts.wanted)
	out := make([]CapStatus, len(chs))
	for i := range chs {
		out[i] = chs[i].CapStatus
	}
	return out, nil
}
