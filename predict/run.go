package predict

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

const pageSize = kernel.PageSize

// pageRange is pages [first, end) of the model file.
type pageRange struct{ first, end int32 }

// call is one llama_decode call of the run: its phase and the file's
// pages its graph reads, in graph order.
type call struct {
	phase uint8
	reads []pageRange
	// of names each read's weight: its tensor, expert (-1 for a whole
	// tensor) and layer (-1 past the blocks), what a prefetch groups by.
	of []readOf
	// token is the call's token number (the trace's key for its faults);
	// start and end its time, 0 when not recorded.
	token      uint32
	start, end uint64
}

// readOf is the weight one read of a call's stream reads.
type readOf struct {
	tensor uint32
	expert int16
	layer  int16
}

// measured is what the run itself measured in one phase, summed over its
// calls.
type measured struct {
	calls          int
	tokens         int64 // the batch tokens of its calls
	bytes, majors  uint64
	wallNS, waitNS uint64
	// idleWaitNS is the part of waitNS the model's disk was idle for: the
	// faults' own work (allocating, reclaiming, unmapping and inserting
	// pages), not the device's.
	idleWaitNS uint64
}

// computePerCall is the phase's time a call spent not waiting on faults.
func (m *measured) computePerCall() float64 {
	return float64(m.wallNS-min(m.waitNS, m.wallNS)) / float64(m.calls)
}

// waitPerByte is the phase's fault wait per byte read, 0 where it read
// nothing.
func (m *measured) waitPerByte() float64 { return perByte(m.waitNS, m.bytes) }

// kernelPerByte is the kernel's work of reading a byte of the model in
// the phase's calls, as the run measured it: the fault wait per byte
// read that the model's disk was idle for (allocating the page,
// reclaiming another, unmapping it). 0 where it read nothing.
func (m *measured) kernelPerByte() float64 { return perByte(m.idleWaitNS, m.bytes) }

func perByte(ns, bytes uint64) float64 {
	if bytes == 0 {
		return 0
	}
	return float64(ns) / float64(bytes)
}

// Run is what a prediction needs from one recorded run: the access stream
// of every call, the model file's layout, and the run's own measurements
// (its budget, non-file memory, bytes, faults, stall and time per call).
type Run struct {
	// bounds are the phases' verdicts in stats' I/O shape (boundsOf),
	// read from recorded on first use (boundsWhy: why they could not be).
	bounds    map[uint8]phaseBound
	boundsWhy string
	recorded  *store.Run

	Model   rundir.ModelFile
	Budget  int64 // the run's memory limit, 0 when it had none
	NonFile int64 // budget − the model's resident bytes at decode token starts (median)
	pages   int32
	calls   []call
	byPhase map[uint8]*measured
	tensors []event.Tensor // the model's real tensors
	unit    []unit         // what a plan can pin, and how often the stream reads each
	Cold    bool           // the run started with none of the model resident
	// loaded says the model was in the page cache before the first call:
	// resident when the run began, or read by the load (llama.cpp's
	// MAP_POPULATE reads the whole file). A cold run that read less than
	// half the file before its first call (a mapping without populate:
	// --no-mmap-prefetch, lazy loading, a toucher) starts empty.
	loaded    bool
	noFigures string // why no figure can be predicted ("" when they can)
	// Picks says why the stream lacks router picks ("" when every MoE layer
	// of every call has them).
	picksNA string

	// stalls are each call's fault waits (by token), disjoint and in
	// order; firstFault the start of each weight's first fault in a call.
	stalls     map[uint32][]span
	firstFault map[faultKey]uint64
	// readers is the most threads that faulted on the model in one decode
	// call: more than one, and runs fall in two modes (the package
	// comment).
	readers int
	// dev is the device as the run's own block requests measured it;
	// disk its profile where the run carries one.
	dev  deviceRate
	disk *rundir.DiskProfile
}

// unit is a plan's grain: a whole tensor, or one expert's slice of an
// *_exps tensor.
type unit struct {
	tensor uint32
	expert int // -1 for a whole tensor
	r      pageRange
	off    int64 // file bytes
	length int64
	reads  int // decode calls whose stream reads it
}

// Load reads a run's store, metadata and residency snapshots into what a
// prediction needs. It reads the aggregates, the picks and the fault
// events once (for the time each call waited on the model: the union of
// its threads' fault stalls).
func Load(recorded *store.Run, snaps []rundir.Snapshot) (*Run, error) {
	st, meta := recorded.Store, recorded.Meta
	r := &Run{byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {}}}
	if len(meta.Models) != 1 {
		return nil, fmt.Errorf("predict models one model file; the run mapped %d", len(meta.Models))
	}
	r.Model = meta.Models[0]
	r.Model.Tensors = nil
	r.Budget = meta.Controls.MemLimit
	r.Cold = meta.Models[0].ResidentBefore == 0
	if meta.DiskNA() == "" {
		r.disk = meta.Disk
	}
	r.pages = int32((r.Model.Size + pageSize - 1) / pageSize)
	for _, t := range st.Tensors {
		if !t.Pseudo() && t.Model == 0 {
			r.tensors = append(r.tensors, t)
		}
	}
	if len(r.tensors) == 0 {
		return nil, fmt.Errorf("the run's store has no tensors of %s", r.Model.Path)
	}
	tokens, err := st.Tokens()
	if err != nil {
		return nil, fmt.Errorf("reading tokens: %w", err)
	}
	// The phases' verdicts cost a second pass over the events; only the
	// prefetch rows and plan's advice read them (Run.bound, on first use).
	r.recorded = recorded
	picks := map[uint32]map[int][]int{} // token → layer → experts picked
	if err := st.ExpertSelections(func(s event.ExpertSel) error {
		if picks[s.Token] == nil {
			picks[s.Token] = map[int][]int{}
		}
		picks[s.Token][int(s.Layer)] = append(picks[s.Token][int(s.Layer)], int(s.Expert))
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading router picks: %w", err)
	}
	order := graphOrder(r.tensors)
	var missing, moeCalls int
	for _, t := range tokens {
		if t.Phase != event.PhasePrefill && t.Phase != event.PhaseDecode {
			continue
		}
		c, lacks := r.stream(order, picks[t.Token])
		c.phase, c.token = t.Phase, t.Token
		if t.EndNS > t.StartNS && t.StartNS > 0 {
			c.start, c.end = t.StartNS, t.EndNS
		}
		r.calls = append(r.calls, c)
		if lacks >= 0 {
			moeCalls++
			if lacks > 0 {
				missing++
			}
		}
		m := r.byPhase[t.Phase]
		m.calls++
		m.tokens += int64(max(t.NTokens, 1))
		if t.EndNS > t.StartNS && t.StartNS > 0 {
			m.wallNS += t.EndNS - t.StartNS
		}
	}
	if missing > 0 {
		r.picksNA = fmt.Sprintf("%d of %d calls lack the router's picks of some MoE layer: their expert reads are unknown", missing, moeCalls)
	} else if why := st.Summary.PicksNA(); why != "" {
		// Some rows of a call's layer seen, others not: its expert set,
		// and so its reads, may be short.
		r.picksNA = why
	}
	phaseOf := map[uint32]uint8{}
	for _, t := range tokens {
		phaseOf[t.Token] = t.Phase
	}
	model := map[uint32]bool{event.TensorModelMeta: true}
	for _, t := range r.tensors {
		model[t.ID] = true
	}
	var loadBytes uint64
	if err := st.Aggs(func(a *event.Agg) error {
		switch m := r.byPhase[phaseOf[a.Token]]; {
		case !model[a.Tensor]:
		case m != nil:
			m.bytes += a.ReadBytes
			m.majors += a.Major
		default:
			loadBytes += a.ReadBytes
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading aggregates: %w", err)
	}
	r.loaded = !r.Cold || 2*int64(loadBytes) >= r.Model.Size-r.Model.DataOffset
	if err := r.measureWait(st, model, phaseOf); err != nil {
		return nil, err
	}
	r.units(picks, phaseOf)
	r.nonFile(snaps, tokens)
	return r, nil
}

// roleRank orders a layer's weights as llama.cpp's graph reads them:
// the attention's norm, Q (and its norm), V, K (and its norm), output;
// the FFN's norm and router; the experts gate (or gate_up where fused),
// up, down; shared experts;
// then a dense FFN. ggml builds a graph depth first from its output, so
// SwiGLU's gate is computed before up although build_moe_ffn makes up
// first, and V before K: the first faults of every decode call of the
// demo MoE and qwen3moe runs came in that order, layer after layer.
func roleRank(role string) int {
	switch {
	case role == "attn_norm":
		return 0
	case role == "attn_q" || role == "attn_q_norm":
		return 1
	case role == "attn_v":
		return 2
	case role == "attn_k" || role == "attn_k_norm":
		return 3
	case strings.HasPrefix(role, "attn"):
		return 4
	case role == "ffn_norm" || role == "post_attention_norm":
		return 5
	case role == "ffn_gate_inp":
		return 6
	case role == "ffn_gate_exps" || role == "ffn_gate_up_exps":
		return 7
	case role == "ffn_up_exps":
		return 8
	case role == "ffn_down_exps":
		return 9
	case strings.Contains(role, "shexp"):
		return 10
	case strings.HasPrefix(role, "ffn"):
		return 11
	}
	return 4
}

// graphOrder lists the weights one call reads, in graph order: the
// blocks by layer, then the output head. The token embedding is read by
// get_rows, a row per token, and left out (a few KiB); where the output
// head is tied to it (no output.weight), it is read whole at the end.
func graphOrder(ts []event.Tensor) []event.Tensor {
	var blocks, tail []event.Tensor
	var embd *event.Tensor
	hasOutput := false
	for i := range ts {
		t := ts[i]
		switch {
		case t.Layer >= 0:
			blocks = append(blocks, t)
		case t.Role == "token_embd":
			embd = &ts[i]
		default:
			hasOutput = hasOutput || t.Role == "output"
			tail = append(tail, t)
		}
	}
	slices.SortStableFunc(blocks, func(a, b event.Tensor) int {
		return cmp.Or(cmp.Compare(a.Layer, b.Layer), cmp.Compare(roleRank(a.Role), roleRank(b.Role)), cmp.Compare(a.Offset, b.Offset))
	})
	slices.SortStableFunc(tail, func(a, b event.Tensor) int { return cmp.Compare(a.Offset, b.Offset) })
	if !hasOutput && embd != nil {
		tail = append(tail, *embd)
	}
	return append(blocks, tail...)
}

func bytesToPages(off, n int64) pageRange {
	return pageRange{int32(off / pageSize), int32((off + n + pageSize - 1) / pageSize)}
}

// stream is one call's reads. lacks is -1 for a model without experts,
// else how many MoE layers have no picks in the call.
func (r *Run) stream(order []event.Tensor, picks map[int][]int) (c call, lacks int) {
	lacks = -1
	seen := map[int]bool{}
	for _, t := range order {
		layer := int16(max(t.Layer, -1))
		if t.Experts == 0 || t.ExpertStride == 0 {
			c.reads = append(c.reads, bytesToPages(t.Offset, t.Size))
			c.of = append(c.of, readOf{tensor: t.ID, expert: -1, layer: layer})
			continue
		}
		if lacks < 0 {
			lacks = 0
		}
		es := slices.Clone(picks[t.Layer])
		if len(es) == 0 && !seen[t.Layer] {
			lacks++
		}
		seen[t.Layer] = true
		slices.Sort(es)
		for _, e := range slices.Compact(es) {
			c.reads = append(c.reads, bytesToPages(t.Offset+int64(e)*t.ExpertStride, t.ExpertStride))
			c.of = append(c.of, readOf{tensor: t.ID, expert: int16(e), layer: layer})
		}
	}
	return c, lacks
}

// span is a time interval [a, b) in CLOCK_MONOTONIC ns.
type span struct{ a, b uint64 }

// union merges spans (sorted in place) into disjoint ones, in order.
func union(ss []span) []span {
	if len(ss) == 0 {
		return nil
	}
	slices.SortFunc(ss, func(x, y span) int { return cmp.Compare(x.a, y.a) })
	out := []span{ss[0]}
	for _, s := range ss[1:] {
		if cur := &out[len(out)-1]; s.a > cur.b {
			out = append(out, s)
		} else {
			cur.b = max(cur.b, s.b)
		}
	}
	return out
}

// covered is how much of [a, b) the disjoint sorted spans cover, found
// by search: a run's stalls and calls are measured against tens of
// thousands of busy intervals.
func covered(ss []span, a, b uint64) uint64 {
	var n uint64
	for i := sort.Search(len(ss), func(i int) bool { return ss[i].b > a }); i < len(ss) && ss[i].a < b; i++ {
		n += min(ss[i].b, b) - max(ss[i].a, a)
	}
	return n
}

// faultKey is a weight's first fault in a call: token, tensor, expert.
type faultKey struct {
	token, tensor uint32
	expert        int16
}

// measureWait sums, per phase, the time each call waited on the model's
// faults: the union of its threads' fault intervals, so two threads
// waiting at once count once. It is the stall that tokens/s pays. The
// same scan keeps what a prefetch's prediction reads from the trace: each
// weight's first fault in each call, the threads that faulted in a decode
// call, and the device's read requests (the rate it served them at).
func (r *Run) measureWait(st *store.Store, model map[uint32]bool, phaseOf map[uint32]uint8) error {
	by := map[uint32][]span{}
	r.firstFault = map[faultKey]uint64{}
	readers := map[uint32]map[uint32]bool{}
	var blocks []span
	var blockBytes uint64
	requests := map[uint32]bool{}
	err := st.Events(store.EventFilter{}, func(e *event.Event) error {
		switch {
		case e.Kind == event.KindFault && model[e.Tensor] && e.Dur > 0 && e.Dur <= e.Ts:
			by[e.Token] = append(by[e.Token], span{e.Ts - e.Dur, e.Ts})
			k := faultKey{e.Token, e.Tensor, e.Expert}
			if t, ok := r.firstFault[k]; !ok || e.Ts-e.Dur < t {
				r.firstFault[k] = e.Ts - e.Dur
			}
			if phaseOf[e.Token] == event.PhaseDecode {
				if readers[e.Token] == nil {
					readers[e.Token] = map[uint32]bool{}
				}
				readers[e.Token][e.Tid] = true
			}
		case e.Kind == event.KindBlock && event.BlockRead(e.Class) && !e.CompletionUnseen() && e.Dur > 0 && e.Dur <= e.Ts:
			blocks = append(blocks, span{e.Ts - e.Dur, e.Ts})
			blockBytes += e.Bytes
			requests[e.Req] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading fault events: %w", err)
	}
	r.stalls = map[uint32][]span{}
	for tok, ss := range by {
		u := union(ss)
		r.stalls[tok] = u
		if m := r.byPhase[phaseOf[tok]]; m != nil {
			m.waitNS += covered(u, 0, math.MaxUint64)
		}
	}
	for _, ts := range readers {
		r.readers = max(r.readers, len(ts))
	}
	r.device(union(blocks), blockBytes, len(requests), r.disk)
	for tok, u := range r.stalls {
		m := r.byPhase[phaseOf[tok]]
		if m == nil || r.dev.why != "" {
			continue
		}
		m.idleWaitNS += idleWait(u, r.dev.busy)
	}
	return nil
}

// idleWait is the time of stalls (disjoint) that no busy span (sorted,
// disjoint) covers.
func idleWait(stalls, busy []span) uint64 {
	var n uint64
	for _, s := range stalls {
		n += s.b - s.a - covered(busy, s.a, s.b)
	}
	return n
}

// units lists the plan's grains, with how many decode calls read each.
func (r *Run) units(picks map[uint32]map[int][]int, phaseOf map[uint32]uint8) {
	decode := r.byPhase[event.PhaseDecode].calls
	hot := map[[2]int]int{} // (layer, expert) → decode calls picking it
	for tok, ls := range picks {
		if phaseOf[tok] != event.PhaseDecode {
			continue
		}
		for l, es := range ls {
			for _, e := range slices.Compact(slices.Sorted(slices.Values(es))) {
				hot[[2]int{l, e}]++
			}
		}
	}
	for _, t := range r.tensors {
		if t.Experts == 0 || t.ExpertStride == 0 {
			if t.Role == "token_embd" {
				continue
			}
			r.unit = append(r.unit, unit{tensor: t.ID, expert: -1, r: bytesToPages(t.Offset, t.Size), off: t.Offset, length: t.Size, reads: decode})
			continue
		}
		for e := range t.Experts {
			off := t.Offset + int64(e)*t.ExpertStride
			r.unit = append(r.unit, unit{tensor: t.ID, expert: e, r: bytesToPages(off, t.ExpertStride), off: off, length: t.ExpertStride, reads: hot[[2]int{t.Layer, e}]})
		}
	}
}

// nonFile is the cgroup's memory besides the model file: the budget less
// the model's resident bytes at the decode tokens' starts (median of the
// snapshots), as the run measured it.
func (r *Run) nonFile(snaps []rundir.Snapshot, tokens []event.TokenInfo) {
	if r.Budget <= 0 {
		r.noFigures = "the run had no memory limit: its non-file memory under a budget was not measured (record it with --mem-limit)"
		return
	}
	phase := map[uint32]uint8{}
	for _, t := range tokens {
		phase[t.Token] = t.Phase
	}
	var res []int64
	for _, s := range snaps {
		if phase[s.Token] == event.PhaseDecode && len(s.Models) > 0 && s.Models[0] != nil {
			res = append(res, s.Models[0].Resident*pageSize)
		}
	}
	if len(res) == 0 {
		r.noFigures = "the run has no residency snapshot of a decode token: its non-file memory was not measured"
		return
	}
	slices.Sort(res)
	r.NonFile = max(r.Budget-res[len(res)/2], 0)
}
