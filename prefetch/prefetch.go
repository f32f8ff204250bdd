// Package prefetch brings the experts the router picks into the page cache
// the model's mapping reads from, before llama.cpp's expert matmuls fault
// them in one read-around at a time. It is fed the router probe's picks
// and the command's faults in the model files (by the recorder, from the
// ring buffer: it links no BPF), maps each pick to its expert slices
// through the GGUF (gate, up, down, gate_up, their biases), and asks the
// kernel for the slices' pages not in the cache yet with
// posix_fadvise(WILLNEED), from a helper process in the command's memory
// cgroup: page-cache pages are charged to the cgroup of the task that
// reads them in, so a prefetcher outside it would cheat the budget.
//
// What it asked for is bounded by a window: the bytes brought in for the
// layer being computed, which its experts still need. A layer's slices
// count as used once the next layer's picks arrive (a layer's expert
// matmuls end before the next layer's router runs), so the window never
// asks the budget for more than one layer's picked slices at once.
//
// Each page it brought in ends one of three ways, told by the command's
// major faults on it while the pick's layer ran and a few layers after:
// arrived (no major fault: the page was in the cache at its first use,
// perhaps still being read), late (faulted before the kernel had the
// request: the helper was behind) or evicted unused (faulted after the
// request: brought in and reclaimed before it was used).
package prefetch

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// Config is what a prefetch run is asked for.
type Config struct {
	// Window is the most bytes brought in for a layer's picks that the
	// layer has not used yet; 0 is DefaultWindow of the memory limit.
	Window int64
	// Layers also asks, at each layer's first pick, for the next layer's
	// dense weights (every tensor of it that is no expert tensor), which
	// the graph reads right after this layer's experts, after them in the
	// same window; at the last layer's, for the output head (head).
	Layers bool
	// Release advises the kernel, at each layer's first pick, that the
	// pages brought in for the layer before it, which it has used, may
	// be reclaimed first (releaser).
	Release bool
	// Issued, when set, sees every slice a pick asked for, in the order
	// asked, on the goroutine that feeds the picks.
	Issued func(Issue)
}

// DefaultWindow is the window of a run under memLimit bytes: a quarter of
// the budget, so that one layer's picked slices never push out more than
// that of what the token still needs; unbounded (0) without a limit.
func DefaultWindow(memLimit int64) int64 {
	if memLimit <= 0 {
		return 0
	}
	return memLimit / 4
}

// Issue is one slice a pick asked for: an expert's, or (Config.Layers)
// a dense weight of the next layer, whose Expert is -1.
type Issue struct {
	Token  uint32
	Layer  int // the tensor's layer
	Expert int
	Tensor string
	Path   string
	// Off and Len are the slice's bytes in Path.
	Off, Len int64
	// Asked is the bytes of it asked of the kernel: its pages not in the
	// cache, within the window.
	Asked int64
}

// model is one model file the picks map into.
type model struct {
	path    string
	idx     int
	dev     uint32
	ino     uint64
	mapped  *pagecache.Mapped
	byLayer map[int][]*gguf.Tensor
	dense   map[int][]*gguf.Tensor // the layers' other tensors
	// outer are its tensors of no layer (the embedding, the output head).
	outer    []*gguf.Tensor
	openSent bool
}

// headTensor is a tensor of the output head and the file holding it.
type headTensor struct {
	m *model
	t *gguf.Tensor
}

// rng is one slice asked for: the pages it brought in and what became of
// them.
type rng struct {
	m     *model
	first int64 // page number
	// brought: pages not in the cache when asked, and asked for; cached:
	// pages in the cache when asked (not asked for).
	brought, cached []bool
	// askNS is when the slice was asked for (CLOCK_MONOTONIC, the faults'
	// clock): a fault on a cached page that began after it is a page
	// evicted before its use, one before it a fault the pick came late to.
	askNS uint64
	// faultNS: the first major fault's start on each brought page.
	faultNS []uint64
	calls   []*call
}

// call is one WILLNEED call of pages [lo, hi) of a range.
type call struct {
	lo, hi int
	doneNS uint64 // when the helper's call returned; 0 until known
}

// window is one layer's picks of one token.
type window struct {
	token   uint32
	layer   int
	experts map[int]bool
	ranges  []*rng
	bytes   int64 // brought in
	// denseAsked: the next layer's dense weights were asked for.
	denseAsked bool
}

// keepWindows is how many layers after its own a window's pages are
// watched for faults before it is settled: the faults of a layer's use
// may reach the reader after the next layer's picks.
const keepWindows = 4

// Prefetcher acts on picks and faults; it is safe for one feeding
// goroutine and Close from another once feeding stopped.
type Prefetcher struct {
	cfg Config
	// helper is the helper process, in its stdin and out its stdout.
	helper *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	models []*model
	// head is what the graph reads after the last layer (head), asked at
	// that layer's picks with Config.Layers.
	head []headTensor
	last int

	mu      sync.Mutex
	rel     releaser
	windows []*window
	bySeq   map[uint64]*call
	seq     uint64
	rep     rundir.Prefetched
	vec     []byte
	// outcomes: whether faults are fed (the tracer has them).
	outcomes bool
	selfNS   int64
	errs     []string
	acks     chan struct{}
	// lines go to the helper from a goroutine of their own, so that a
	// helper behind never holds up the ring's reader.
	lines chan string
	wrote chan struct{}
}

// sendQueue is how many calls may wait for the helper: past it, what a
// pick asks is dropped (Prefetched.DroppedBytes) rather than the reader
// kept waiting.
const sendQueue = 4096

// Start starts the helper, placed by place (into the command's memory
// cgroup; nil leaves it where iocorr runs), and returns a prefetcher for
// files (the run's model files; those with expert tensors are used).
// outcomes says whether faults will be fed (OnFault): without them what
// became of the pages is NA.
func Start(cfg Config, files []rundir.ModelFile, place func(pid int) error, outcomes bool) (*Prefetcher, error) {
	p := &Prefetcher{cfg: cfg, bySeq: map[uint64]*call{}, outcomes: outcomes, acks: make(chan struct{}),
		lines: make(chan string, sendQueue), wrote: make(chan struct{})}
	p.rep.Window, p.rep.Layers, p.rep.Release = cfg.Window, cfg.Layers, cfg.Release
	if !outcomes {
		p.rep.OutcomeNA = "the command's faults were not traced (this kernel gave no fault hooks)"
	}
	for _, f := range files {
		p.addModel(f)
	}
	// It dies with iocorr: a helper left behind would hold its cgroup.
	cmd, in, out, err := launch.StartHelper(helperEnv, "the prefetcher's helper", &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}, place)
	if err != nil {
		p.closeModels()
		return nil, err
	}
	p.helper, p.in, p.out = cmd, in, bufio.NewReader(out)
	go p.readAcks()
	go p.writeLines()
	return p, nil
}

// AddModel makes a model file the command mapped later usable by picks.
func (p *Prefetcher) AddModel(f rundir.ModelFile) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addModel(f)
}

func (p *Prefetcher) addModel(f rundir.ModelFile) {
	for _, m := range p.models {
		if m.dev == f.Dev && m.ino == f.Ino {
			return
		}
	}
	gf, err := gguf.Open(f.Path)
	if err != nil {
		p.errs = append(p.errs, err.Error())
		return
	}
	m := &model{path: f.Path, idx: len(p.models), dev: f.Dev, ino: f.Ino, byLayer: map[int][]*gguf.Tensor{}, dense: map[int][]*gguf.Tensor{}}
	for _, t := range gf.TensorsByOffset() {
		switch {
		case t.Layer < 0:
			m.outer = append(m.outer, t)
		case t.Experts > 0:
			m.byLayer[t.Layer] = append(m.byLayer[t.Layer], t)
		default:
			m.dense[t.Layer] = append(m.dense[t.Layer], t)
		}
	}
	if len(m.byLayer) == 0 {
		return
	}
	for _, ts := range m.byLayer {
		slices.SortStableFunc(ts, func(a, b *gguf.Tensor) int { return graphRank(a.Role) - graphRank(b.Role) })
	}
	if m.mapped, err = pagecache.Map(f.Path); err != nil {
		p.errs = append(p.errs, err.Error())
		return
	}
	p.models = append(p.models, m)
	// The head and the last layer are the model's, over its files: a
	// split model's head is in one file, its layers in several.
	var outer []*gguf.Tensor
	of := map[*gguf.Tensor]*model{}
	for _, pm := range p.models {
		for l := range pm.byLayer {
			p.last = max(p.last, l)
		}
		for l := range pm.dense {
			p.last = max(p.last, l)
		}
		for _, t := range pm.outer {
			outer, of[t] = append(outer, t), pm
		}
	}
	p.head = p.head[:0]
	for _, t := range head(outer) {
		p.head = append(p.head, headTensor{of[t], t})
	}
}

// head is the output head, in the order the graph reads it after the
// last layer: the output norm, then the output projection, which is the
// token embedding where the model has none of its own (tied, as
// llama.cpp's loader takes it). predict's prefetch-layers asks for what
// a run's trace read after its last layer's start, which is this.
func head(ts []*gguf.Tensor) []*gguf.Tensor {
	var norm, out, embd []*gguf.Tensor
	for _, t := range ts {
		switch {
		case t.Layer >= 0:
		case t.Role == "output_norm":
			norm = append(norm, t)
		case t.Role == "output":
			out = append(out, t)
		case t.Role == "token_embd":
			embd = append(embd, t)
		}
	}
	if len(out) == 0 {
		out = embd
	}
	return append(norm, out...)
}

// graphRank is where llama.cpp's MoE FFN reads an expert tensor of the
// role: the gate (or the fused gate_up) first, then the up projection,
// then the down; others after, in file order. build_moe_ffn builds the
// up's MUL_MAT_ID before the gate's, but ggml orders the graph's nodes
// depth-first from the result, whose first source is the gate's branch:
// the decode faults of a traced run of the skewed router reached gate,
// up and down in that order in 102 of 115 layer-tokens. Asked in file
// order (gate, down, up here), the up slices were asked after the downs
// and faulted on first.
func graphRank(role string) int {
	switch role {
	case "ffn_gate_up_exps", "ffn_gate_exps":
		return 0
	case "ffn_up_exps":
		return 1
	case "ffn_down_exps":
		return 2
	}
	return 3
}

// Models says how many model files with experts the picks map into.
func (p *Prefetcher) Models() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.models)
}

// ownCPU starts timing the prefetcher's own work on the calling
// goroutine (it runs on the reader's, between records); the function it
// returns ends it and adds the CPU time to *ns. The goroutine is held on
// its thread meanwhile: a thread's CPU clock read on two threads gave
// negative times when the write to the helper's pipe moved it.
func ownCPU(ns *int64) func() {
	runtime.LockOSThread()
	t0 := threadCPU()
	return func() {
		*ns += threadCPU() - t0
		runtime.UnlockOSThread()
	}
}

// monotonicNS is CLOCK_MONOTONIC now, the clock of the faults' stamps.
func monotonicNS() uint64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return uint64(ts.Nano())
}

func threadCPU() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// layerOf is the layer a router node's name ends in ("ffn_moe_weights-5").
func layerOf(name string) (int, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return 0, false
	}
	l, err := strconv.Atoi(name[i+1:])
	return l, err == nil && l >= 0
}

// OnPicks asks for the slices of the experts e names that its layer has
// not asked for yet in this token.
func (p *Prefetcher) OnPicks(e *wire.ExpertsEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	defer ownCPU(&p.selfNS)()
	layer, ok := layerOf(wire.CString(e.Name[:]))
	if !ok {
		return
	}
	w := p.current(e.Hdr.Token, layer, int(e.Hdr.Tgid))
	cnt := min(int(e.Count), len(e.Ids))
	var ids []int
	for _, id := range e.Ids[:cnt] {
		if id < 0 || w.experts[int(id)] {
			continue
		}
		w.experts[int(id)] = true
		ids = append(ids, int(id))
	}
	// In the order the graph reads them (graphRank): each expert tensor
	// (one MUL_MAT_ID each) for every picked expert before the next
	// tensor. Asked expert by expert, the second expert's gate slice was
	// asked after the first's down, and the graph faulted on its first
	// page before that, with a read-around of the disk's window (16 MiB
	// here) around it.
	for _, m := range p.models {
		for _, t := range m.byLayer[layer] {
			for _, id := range ids {
				if id >= t.Experts {
					continue
				}
				off, end := t.ExpertRange(id)
				p.askFor(w, m, t, id, off, end)
			}
		}
	}
	if p.cfg.Layers && !w.denseAsked {
		w.denseAsked = true
		if layer == p.last {
			for _, h := range p.head {
				p.askFor(w, h.m, h.t, -1, h.t.FileOffset, h.t.End())
			}
		} else {
			for _, m := range p.models {
				for _, t := range m.dense[layer+1] {
					p.askFor(w, m, t, -1, t.FileOffset, t.End())
				}
			}
		}
	}
}

// askFor asks for [off, end) of tensor t (expert e, -1 for a whole dense
// tensor) and tells Config.Issued.
func (p *Prefetcher) askFor(w *window, m *model, t *gguf.Tensor, e int, off, end int64) {
	if end <= off {
		return
	}
	asked := p.ask(w, m, off, end-off)
	if p.cfg.Issued != nil {
		p.cfg.Issued(Issue{Token: w.token, Layer: t.Layer, Expert: e, Tensor: t.Name, Path: m.path, Off: off, Len: end - off, Asked: asked})
	}
}

// current is the window of token's layer: a new one when the picks moved
// on, which releases the last one (Config.Release) and settles the oldest
// kept.
func (p *Prefetcher) current(token uint32, layer, pid int) *window {
	if n := len(p.windows); n > 0 {
		w := p.windows[n-1]
		if w.token == token && w.layer == layer {
			return w
		}
		if p.cfg.Release {
			n, err := p.rel.release(w, pid)
			p.rep.ReleasedBytes += n
			if err != nil {
				p.errs = append(p.errs, "--release: "+err.Error()+"; the run goes on without it")
			}
		}
	}
	p.rep.Picks++
	w := &window{token: token, layer: layer, experts: map[int]bool{}}
	p.windows = append(p.windows, w)
	if len(p.windows) > keepWindows {
		p.settle(p.windows[0])
		p.windows = p.windows[1:]
	}
	return w
}

// ask asks for the pages of [off, off+n) of m not in the cache, as far as
// the window allows, and returns the bytes asked.
func (p *Prefetcher) ask(w *window, m *model, off, n int64) int64 {
	var err error
	p.vec, err = m.mapped.Resident(off, n, p.vec)
	if err != nil {
		p.errs = append(p.errs, err.Error())
		return 0
	}
	ps := int64(kernel.PageSize)
	p.rep.Ranges++
	p.rep.Bytes += int64(len(p.vec)) * ps
	first := off / ps
	r := &rng{m: m, first: first, brought: make([]bool, len(p.vec)), cached: make([]bool, len(p.vec)), askNS: monotonicNS()}
	var asked int64
	// Runs of pages not resident, each one call.
	for i := 0; i < len(p.vec); {
		if p.vec[i]&1 == 1 {
			p.rep.ResidentBytes += ps
			r.cached[i] = true
			i++
			continue
		}
		j := i
		for j < len(p.vec) && p.vec[j]&1 == 0 {
			j++
		}
		b := int64(j-i) * ps
		full := p.cfg.Window > 0 && w.bytes+b > p.cfg.Window
		if full {
			b = max(0, (p.cfg.Window-w.bytes)/ps*ps)
			j = i + int(b/ps)
		}
		if b > 0 && p.send(m, r, i, j, (first+int64(i))*ps, b) {
			for k := i; k < j; k++ {
				r.brought[k] = true
			}
			w.bytes += b
			asked += b
		}
		if full {
			// The rest of the slice is over the window.
			for k := j; k < len(p.vec); k++ {
				if p.vec[k]&1 == 0 {
					p.rep.OverWindowBytes += ps
				} else {
					p.rep.ResidentBytes += ps
				}
			}
			break
		}
		i = j
	}
	// A slice asked for nothing is watched too: its pages' faults are
	// what a cached slice evicted before its use costs. Only brought
	// pages' faults are timed.
	if asked > 0 {
		r.faultNS = make([]uint64, len(r.brought))
	}
	w.ranges = append(w.ranges, r)
	return asked
}

// send hands the helper one call of pages [i, j) of r, unless its queue
// is full.
func (p *Prefetcher) send(m *model, r *rng, i, j int, off, n int64) bool {
	if !m.openSent {
		m.openSent = true
		p.lines <- fmt.Sprintf("o %d %s\n", m.idx, m.path)
	}
	p.seq++
	select {
	case p.lines <- fmt.Sprintf("w %d %d %d %d\n", p.seq, m.idx, off, n):
	default:
		p.rep.DroppedBytes += n
		return false
	}
	c := &call{lo: i, hi: j}
	r.calls = append(r.calls, c)
	p.bySeq[p.seq] = c
	p.rep.Calls++
	p.rep.AskedBytes += n
	return true
}

// writeLines hands the queued lines to the helper.
func (p *Prefetcher) writeLines() {
	defer close(p.wrote)
	failed := false
	for l := range p.lines {
		if failed {
			continue
		}
		if _, err := io.WriteString(p.in, l); err != nil {
			failed = true
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Sprintf("the prefetcher's helper: %v", err))
			p.mu.Unlock()
		}
	}
}

// OnFault watches the command's major faults in the model files.
func (p *Prefetcher) OnFault(e *wire.FaultEvent) {
	if e.Class != uint8(wire.FaultClassFAULT_MAJOR) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer ownCPU(&p.selfNS)()
	for _, m := range p.models {
		if m.dev == e.Dev && m.ino == e.Ino {
			p.rep.ModelMajorFaults++
			break
		}
	}
	page := int64(e.FileOff) / int64(kernel.PageSize)
	ts := e.StartTs
	if ts == 0 {
		ts = e.Hdr.Ts
	}
	for i := len(p.windows) - 1; i >= 0; i-- {
		for _, r := range p.windows[i].ranges {
			if r.m.dev != e.Dev || r.m.ino != e.Ino {
				continue
			}
			k := page - r.first
			if k < 0 || k >= int64(len(r.brought)) {
				continue
			}
			if !r.brought[k] {
				p.rep.PickedMajorFaults++
				if r.cached[k] && ts >= r.askNS {
					p.rep.CachedMajorFaults++
				}
				return
			}
			if r.faultNS[k] == 0 {
				r.faultNS[k] = ts
			}
			return
		}
	}
}

// settle counts what became of a window's pages.
func (p *Prefetcher) settle(w *window) {
	ps := int64(kernel.PageSize)
	for _, r := range w.ranges {
		for _, c := range r.calls {
			for k := c.lo; k < c.hi; k++ {
				switch {
				case r.faultNS[k] == 0:
					p.rep.ArrivedBytes += ps
				case c.doneNS == 0 || r.faultNS[k] < c.doneNS:
					p.rep.LateBytes += ps
				default:
					p.rep.EvictedUnusedBytes += ps
				}
			}
		}
	}
}

// readAcks notes when each of the helper's calls returned.
func (p *Prefetcher) readAcks() {
	defer close(p.acks)
	for {
		line, err := p.out.ReadString('\n')
		if err != nil {
			return
		}
		var seq, ns uint64
		var errno int
		if _, err := fmt.Sscanf(line, "d %d %d %d", &seq, &ns, &errno); err != nil {
			p.mu.Lock()
			p.errs = append(p.errs, fmt.Sprintf("the prefetcher's helper said %q", strings.TrimSpace(line)))
			p.mu.Unlock()
			continue
		}
		p.mu.Lock()
		if c := p.bySeq[seq]; c != nil {
			c.doneNS = ns
			delete(p.bySeq, seq)
		}
		if errno != 0 {
			p.rep.Failed++
			if p.rep.Failed == 1 {
				p.errs = append(p.errs, fmt.Sprintf("posix_fadvise(WILLNEED): %v", syscall.Errno(errno)))
			}
		}
		p.mu.Unlock()
	}
}

// Close ends the helper, settles every window and gives the report.
func (p *Prefetcher) Close() rundir.Prefetched {
	close(p.lines)
	<-p.wrote
	p.in.Close()
	err := p.helper.Wait()
	var ru *syscall.Rusage
	if p.helper.ProcessState != nil {
		ru, _ = p.helper.ProcessState.SysUsage().(*syscall.Rusage)
	}
	<-p.acks
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.errs = append(p.errs, fmt.Sprintf("the prefetcher's helper: %v", err))
	}
	for _, w := range p.windows {
		p.settle(w)
	}
	p.windows = nil
	if p.cfg.Release && p.rep.ReleasedBytes == 0 {
		p.rep.ReleaseNA = p.rel.na()
	}
	p.rel.close()
	p.closeModels()
	if ru != nil {
		p.rep.HelperCPUNS = syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)
	}
	p.rep.SelfCPUNS = p.selfNS
	if !p.outcomes {
		p.rep.ArrivedBytes, p.rep.LateBytes, p.rep.EvictedUnusedBytes, p.rep.ModelMajorFaults, p.rep.PickedMajorFaults, p.rep.CachedMajorFaults = 0, 0, 0, 0, 0, 0
	}
	p.rep.Errors = slices.Clone(p.errs)
	return p.rep
}

func (p *Prefetcher) closeModels() {
	for _, m := range p.models {
		if m.mapped != nil {
			m.mapped.Close()
			m.mapped = nil
		}
	}
}

// helperEnv marks the re-executed iocorr that is the prefetcher's helper.
const helperEnv = "IOCORR_PREFETCHER"

// RunHelperIfChild must be called first in main (and in TestMain of a
// test binary that prefetches): in the helper it serves the prefetcher's
// calls until its stdin closes, then exits.
func RunHelperIfChild() {
	if !launch.IsHelper(helperEnv) {
		return
	}
	out := bufio.NewWriter(os.Stdout)
	if err := serve(os.Stdin, out); err != nil {
		fmt.Fprintf(os.Stderr, "iocorr: the prefetcher's helper: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve reads the prefetcher's lines: "o IDX PATH" opens a model file,
// "w SEQ IDX OFF LEN" asks the kernel for its bytes; each "w" is answered
// "d SEQ MONOTONIC_NS ERRNO" once the calls returned.
func serve(in io.Reader, out *bufio.Writer) error {
	files := map[int]*os.File{}
	chunks := map[int]int64{}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[0] == "o":
			idx, err := strconv.Atoi(f[1])
			if err != nil {
				return fmt.Errorf("bad line %q", sc.Text())
			}
			path := strings.SplitN(sc.Text(), " ", 3)[2]
			fh, err := os.Open(path)
			if err != nil {
				return err
			}
			files[idx] = fh
			chunks[idx] = blockdev.WillNeedChunk(fh)
		case len(f) == 5 && f[0] == "w":
			var v [4]int64
			for i := range v {
				n, err := strconv.ParseInt(f[i+1], 10, 64)
				if err != nil {
					return fmt.Errorf("bad line %q", sc.Text())
				}
				v[i] = n
			}
			fh := files[int(v[1])]
			if fh == nil {
				return fmt.Errorf("file %d was never opened", v[1])
			}
			errno := pagecache.WillNeed(fh, v[2], v[3], chunks[int(v[1])])
			fmt.Fprintf(out, "d %d %d %d\n", v[0], monotonicNS(), errno)
			if err := out.Flush(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("bad line %q", sc.Text())
		}
	}
	return sc.Err()
}

// Summary is the report as stderr's lines: what was asked, what arrived.
func Summary(r *rundir.Prefetched) string {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	var b strings.Builder
	win := "unbounded"
	if r.Window > 0 {
		win = mib(r.Window)
	}
	what := "expert slices"
	if r.Layers {
		what = "expert slices and next layers' dense weights"
	}
	fmt.Fprintf(&b, "prefetch: %d picks (layer × token), %d %s, %s; %s already cached; asked %s in %d calls (window %s; %s over it)\n",
		r.Picks, r.Ranges, what, mib(r.Bytes), mib(r.ResidentBytes), mib(r.AskedBytes), r.Calls, win, mib(r.OverWindowBytes))
	if r.OutcomeNA != "" {
		fmt.Fprintf(&b, "prefetch: arrived before use NA: %s\n", r.OutcomeNA)
	} else {
		pct := func(x int64) string {
			if r.AskedBytes == 0 {
				return "NA"
			}
			return fmt.Sprintf("%.0f%%", 100*float64(x)/float64(r.AskedBytes))
		}
		// A late or evicted page is one major fault of the command, which
		// read the fault's whole read-around, not the page: its bytes
		// alone would make a race the graph won (a pick's first slice)
		// look free.
		ps := int64(kernel.PageSize)
		fmt.Fprintf(&b, "prefetch: arrived before use %s (%s), late %s (%s; %d major faults, each with its read-around), evicted unused %s (%s; %d major faults); %d major faults in the model files, %d of them in picked slices on pages it did not bring in (%d on pages cached when asked and evicted before their use)\n",
			mib(r.ArrivedBytes), pct(r.ArrivedBytes), mib(r.LateBytes), pct(r.LateBytes), r.LateBytes/ps, mib(r.EvictedUnusedBytes), pct(r.EvictedUnusedBytes), r.EvictedUnusedBytes/ps, r.ModelMajorFaults, r.PickedMajorFaults, r.CachedMajorFaults)
	}
	switch {
	case r.Release && r.ReleaseNA != "":
		fmt.Fprintf(&b, "prefetch: released NA: %s\n", r.ReleaseNA)
	case r.Release:
		fmt.Fprintf(&b, "prefetch: released %s once used (MADV_COLD)\n", mib(r.ReleasedBytes))
	}
	fmt.Fprintf(&b, "prefetch: own CPU %.3f s (helper %.3f s, picks and faults %.3f s)\n",
		float64(r.HelperCPUNS+r.SelfCPUNS)/1e9, float64(r.HelperCPUNS)/1e9, float64(r.SelfCPUNS)/1e9)
	if r.DroppedBytes > 0 {
		fmt.Fprintf(&b, "prefetch: %s not asked for: the helper was too far behind\n", mib(r.DroppedBytes))
	}
	for _, e := range r.Errors {
		fmt.Fprintf(&b, "prefetch: %s\n", e)
	}
	return b.String()
}
