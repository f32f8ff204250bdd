package stats

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"sort"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/extsort"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

// Options choose the expert-cache simulations.
type Options struct {
	// K lists the per-layer cache sizes, in experts, to simulate; nil
	// means every size from 1 to the layer's expert count.
	K []int
	// Budgets lists byte budgets for one cache shared by all MoE layers.
	Budgets []int64
	// Top is how many tensors each top list names (default 10).
	Top int
	// NoTokenResidency leaves out the residency table (a row per token ×
	// tensor) and the per-token snapshots behind it: the one table whose
	// memory grows with tokens × tensors (2.2 GB for 20,000 tokens of a
	// small model), for callers that do not show it.
	NoTokenResidency bool
	// Snapshots are the run's residency snapshots (rundir.ReadSnapshots):
	// a run without page-cache events takes its residency from them.
	Snapshots []rundir.Snapshot
}

// Report is every table of a run's statistics.
type Report struct {
	Status string // rundir.Meta.Status(): non-empty when the run is partial
	Tables []Table
	snaps  *tokenSnaps // what the residency table's rows are read from
}

// Close drops what the report keeps outside memory (the residency
// table's snapshots); its tables are not to be read after.
func (r *Report) Close() error { return r.snaps.Close() }

// Table returns the table named name, nil if absent.
func (r *Report) Table(name string) *Table {
	for i := range r.Tables {
		if r.Tables[i].Name == name {
			return &r.Tables[i]
		}
	}
	return nil
}

const ps = kernel.PageSize

var phases = []struct {
	name string
	sel  func(uint8) bool
}{
	{"prefill", func(p uint8) bool { return p == event.PhasePrefill }},
	{"decode", func(p uint8) bool { return p == event.PhaseDecode }},
	{"all", func(uint8) bool { return true }},
}

// run holds what Compute gathers before it makes tables.
type run struct {
	st      *store.Store
	meta    *rundir.Meta
	opt     Options
	tokens  []event.TokenInfo
	phaseOf map[uint32]uint8
	tensor  []event.Counters // whole-run totals by tensor id
	sels    []event.ExpertSel
	// From the event pass, which holds none of the run's events: what
	// needs them in another order goes through an external sort.
	stall  map[uint32]uint64 // fault stall within each token's call, by token
	shapes []shape           // the I/O shape, by index in shapeTokens
	// shapeTokens are the tokens and every token the events name besides
	// (shaper.everyToken).
	shapeTokens []event.TokenInfo
	reqHist     map[int]int // device read requests by bits.Len64 of their size
	reqs        int         // device read requests
	backSeeks   [2]int      // backward seeks, consecutive pairs in one model file
	uniqueRd    []int64     // distinct pages read from the device, by model
	res         *residency
	tokenRes    *tokenSnaps        // resident pages by token index, by tensor id (nil when not asked for)
	snapErr     error              // the first error keeping them
	realHits    map[[2]int]*[2]int // (layer, phase) → hits, activations
	realNA      string
	// snapshotNA says why no decode pick met a residency snapshot, when
	// the residency comes from the recorder's snapshots.
	snapshotNA string
	readsNA    string // why bytes requested is NA, "" when read syscalls were traced
	decodeTok  int
	// expsReadDecode is the device bytes of each layer's *_exps tensors
	// read in decode tokens.
	expsReadDecode map[int]uint64
	waits          waits // the faults' stall and wait by token, from the aggregates

	// tokenResNA says why a token has no residency (no snapshot of its
	// own); refaultsFromReads is set when refaults came from device reads.
	tokenResNA        string
	refaultsFromReads bool
}

// Compute reads the store and metadata of one run and computes every
// table.
func Compute(recorded *store.Run, opt Options) (*Report, error) {
	st, meta := recorded.Store, recorded.Meta
	if opt.Top <= 0 {
		opt.Top = 10
	}
	r := &run{st: st, meta: meta, opt: opt, phaseOf: map[uint32]uint8{}, expsReadDecode: map[int]uint64{}, readsNA: meta.ReadsNA()}
	var err error
	if r.tokens, err = st.Tokens(); err != nil {
		return nil, fmt.Errorf("reading tokens: %w", err)
	}
	for _, t := range r.tokens {
		r.phaseOf[t.Token] = t.Phase
		if t.Phase == event.PhaseDecode {
			r.decodeTok++
		}
	}
	r.tensor = make([]event.Counters, len(st.Tensors))
	r.waits = waits{}
	if err := st.Aggs(func(a *event.Agg) error {
		r.waits.add(a)
		if int(a.Tensor) < len(r.tensor) {
			r.tensor[a.Tensor].Add(&a.Counters)
			if t := &st.Tensors[a.Tensor]; !t.Pseudo() && t.Experts > 0 && r.phaseOf[a.Token] == event.PhaseDecode {
				r.expsReadDecode[t.Layer] += a.ReadBytes
			}
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading aggregates: %w", err)
	}
	if err := st.ExpertSelections(func(e event.ExpertSel) error {
		r.sels = append(r.sels, e)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("reading expert selections: %w", err)
	}
	if err := r.eventPass(); err != nil {
		r.tokenRes.Close()
		return nil, err
	}
	rep := &Report{Status: meta.Status(), snaps: r.tokenRes}
	shapeByPhase, shapeByToken := ioShape(r.shapeTokens, r.shapes, meta)
	rep.Tables = append(rep.Tables, r.perToken(), r.tokenTime(), shapeByPhase, r.amplification(), r.requestSizes(),
		r.tensors(), r.layers())
	if !opt.NoTokenResidency {
		rep.Tables = append(rep.Tables, r.residencyPerToken())
	}
	rep.Tables = append(rep.Tables, r.moe()...)
	rep.Tables = append(rep.Tables, r.top(), shapeByToken)
	// Last, so that every caller (stats, its exports, the report, a diff's
	// report, a sweep's summary) shows a counter the run did not measure as
	// NA, never as the zeros the store holds.
	rep.counterNA(meta)
	return rep, nil
}

// request is one block read request, put together from its slices.
type request struct {
	issue, bytes uint64
	model        int   // -1 when its first slice is in no model tensor
	start, end   int64 // file bytes of its model slices
}

type pageEv struct {
	ts         uint64
	model      int32
	first, end int64 // pages
	add        bool
}

// sortBatch is how many records each external sort holds in memory
// (about 2.5 MiB of each kind) before it spills a sorted run.
const sortBatch = 1 << 16

var pageEvCodec = extsort.Ints(5, func(v *pageEv) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{int64(v.ts), int64(v.model), v.first, v.end, extsort.Bool(v.add)}
}, func(v *pageEv, a [extsort.MaxInts]int64) {
	v.ts, v.model, v.first, v.end, v.add = uint64(a[0]), int32(a[1]), a[2], a[3], a[4] == 1
})

// interval is one fault's stall, [start, end), in its token.
type interval struct {
	token      uint32
	start, end uint64
}

var intervalCodec = extsort.Ints(3, func(v *interval) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{int64(v.token), int64(v.start), int64(v.end)}
}, func(v *interval, a [extsort.MaxInts]int64) {
	v.token, v.start, v.end = uint32(a[0]), uint64(a[1]), uint64(a[2])
})

var requestCodec = extsort.Ints(5, func(v *request) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{int64(v.issue), int64(v.bytes), int64(v.model), v.start, v.end}
}, func(v *request, a [extsort.MaxInts]int64) {
	v.issue, v.bytes, v.model, v.start, v.end = uint64(a[0]), uint64(a[1]), int(a[2]), a[3], a[4]
})

// fileRange is where in its model file e's bytes start, when they are in
// a model the metadata names.
func (r *run) fileRange(e *event.Event) (model int, off int64, ok bool) {
	m, off, ok := event.FileOffset(r.st.Tensors, e)
	return m, off, ok && m < len(r.meta.Models)
}

// eventPass reads every event once: the stall of each token, the device
// read requests' sizes and seeks, and the page-cache history. The events
// stream by; the intervals, requests and page events each go through an
// external sort into the order their figure needs.
func (r *run) eventPass() error {
	r.uniqueRd = make([]int64, len(r.meta.Models))
	r.reqHist = map[int]int{}
	readSeen := make([][]uint32, len(r.meta.Models))
	for i := range r.meta.Models {
		readSeen[i] = make([]uint32, pagesOf(r.meta.Models[i].Size))
	}
	// The faults' stall and the requests' time on the device: the I/O
	// shape (ioshape.go), whose fault union is each token's stall.
	sh := newShaper()
	defer sh.Close()
	reqs := extsort.New(sortBatch, func(a, b *request) int { return cmp.Compare(a.issue, b.issue) }, requestCodec)
	defer reqs.Close()
	// Adds are emitted when their trigger is known, after later events:
	// time order is the order the page cache saw them.
	pev := extsort.New(sortBatch, func(a, b *pageEv) int { return cmp.Compare(a.ts, b.ts) }, pageEvCodec)
	defer pev.Close()
	err := r.st.Records(store.EventFilter{}, func(rec []event.Event) error {
		if err := sh.record(rec); err != nil {
			return err
		}
		switch rec[0].Kind {
		case event.KindBlock:
			if event.BlockRead(rec[0].Class) {
				q := r.readRequest(rec, readSeen)
				r.reqHist[bits.Len64(q.bytes)]++
				r.reqs++
				if err := reqs.Add(q); err != nil {
					return err
				}
			}
		case event.KindPageAdd, event.KindPageDel:
			for i := range rec {
				e := &rec[i]
				m, off, ok := r.fileRange(e)
				if !ok {
					continue
				}
				if err := pev.Add(pageEv{ts: e.Ts, model: int32(m), first: off / ps, end: (off + int64(e.Bytes) + ps - 1) / ps, add: e.Kind == event.KindPageAdd}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading events: %w", err)
	}
	if err := r.sumStalls(sh); err != nil {
		return fmt.Errorf("reading events: %w", err)
	}
	if err := r.seeks(reqs); err != nil {
		return fmt.Errorf("reading events: %w", err)
	}
	if err := r.replayPages(pev.Each); err != nil {
		return fmt.Errorf("reading events: %w", err)
	}
	if r.meta.PageCacheNA() != "" {
		r.readRefaults(readSeen)
	}
	return nil
}

// sumStalls takes each token's I/O shape, and its fault stall within its
// llama_decode call (wall time with a fault in a model file in progress).
func (r *run) sumStalls(sh *shaper) error {
	toks := sh.everyToken(slices.Clone(r.tokens))
	shapes, err := sh.shapes(toks, r.waits)
	if err != nil {
		return err
	}
	r.shapeTokens, r.shapes = toks, shapes
	r.stall = map[uint32]uint64{}
	for i := range toks {
		if shapes[i].stall > 0 {
			r.stall[toks[i].Token] = shapes[i].stall
		}
	}
	return nil
}

// seeks counts backward seeks, in issue order, between consecutive
// requests in the same model file: a request starting before the previous
// one ended.
func (r *run) seeks(reqs *extsort.Sorter[request]) error {
	var prev request
	first := true
	return reqs.Each(func(b *request) error {
		if !first && prev.model >= 0 && prev.model == b.model {
			r.backSeeks[1]++
			if b.start < prev.end {
				r.backSeeks[0]++
			}
		}
		prev, first = *b, false
		return nil
	})
}

// readRequest is the block read request whose slices are rec; the model
// pages it read are counted in readSeen, and once each in uniqueRd.
func (r *run) readRequest(rec []event.Event, readSeen [][]uint32) request {
	req := request{issue: rec[0].Ts - rec[0].Dur, model: -1}
	// A request's slices split at tensor bounds, not at pages: a page two
	// tensors share is in two slices, yet read once by the request.
	lastM, lastP := -1, int64(-1)
	for i := range rec {
		e := &rec[i]
		req.bytes += e.Bytes
		m, off, ok := r.fileRange(e)
		if !ok {
			continue
		}
		if req.model < 0 {
			req.model, req.start, req.end = m, off, off+int64(e.Bytes)
		} else if req.model == m {
			req.start, req.end = min(req.start, off), max(req.end, off+int64(e.Bytes))
		}
		for p := off / ps; p < (off+int64(e.Bytes)+ps-1)/ps && p < int64(len(readSeen[m])); p++ {
			if m == lastM && p <= lastP {
				continue
			}
			lastM, lastP = m, p
			if readSeen[m][p]++; readSeen[m][p] == 1 {
				r.uniqueRd[m]++
			}
		}
	}
	return req
}

func pagesOf(size int64) int64 { return (size + ps - 1) / ps }

// tensorPages is how many pages a byte range overlaps.
func rangePages(off, size int64) int64 {
	if size <= 0 {
		return 0
	}
	return (off+size+ps-1)/ps - off/ps
}

// residency tracks which pages of each model file are in the page cache,
// and per tensor (and expert slice) how many of its pages are.
type residency struct {
	known     []string // per model: "" when the state is known, else why not
	state     [][]bool
	evicted   [][]bool
	byModel   [][]uint32 // tensor ids of each model sorted by offset
	tensors   []event.Tensor
	resident  []int64   // by tensor id
	expertRes [][]int64 // by tensor id, by expert
	refaults  []int64   // pages re-added after an eviction, charged to the tensor holding their first byte
	refaultNA string    // why refaults from device reads are NA
}

func newResidency(meta *rundir.Meta, tensors []event.Tensor) *residency {
	rs := &residency{tensors: tensors, resident: make([]int64, len(tensors)),
		expertRes: make([][]int64, len(tensors)), refaults: make([]int64, len(tensors))}
	rs.byModel = make([][]uint32, len(meta.Models))
	for i := range tensors {
		t := &tensors[i]
		if t.Pseudo() || t.Model < 0 || t.Model >= len(meta.Models) {
			continue
		}
		rs.byModel[t.Model] = append(rs.byModel[t.Model], t.ID)
		if t.Experts > 0 {
			rs.expertRes[i] = make([]int64, t.Experts)
		}
	}
	// A run without page-cache events (its probe tier left them off) has
	// no history to replay: its residency is NA, with the tier's reason.
	noPages := meta.PageCacheNA()
	for m, mf := range meta.Models {
		ids := rs.byModel[m]
		sort.Slice(ids, func(a, b int) bool { return tensors[ids[a]].Offset < tensors[ids[b]].Offset })
		n := pagesOf(mf.Size)
		rs.state = append(rs.state, make([]bool, n))
		rs.evicted = append(rs.evicted, make([]bool, n))
		why := mf.ResidencyNA()
		if why == "" {
			why = noPages
		}
		if why == "" && mf.ResidentBefore != 0 {
			for p := range n {
				rs.set(m, p, true)
			}
		}
		rs.known = append(rs.known, why)
	}
	return rs
}

// each calls fn for every tensor of model m overlapping page p.
func (rs *residency) each(m int, p int64, fn func(t *event.Tensor)) {
	ids := rs.byModel[m]
	lo, hi := p*ps, (p+1)*ps
	i := sort.Search(len(ids), func(i int) bool {
		t := &rs.tensors[ids[i]]
		return t.Offset+t.Size > lo
	})
	for ; i < len(ids) && rs.tensors[ids[i]].Offset < hi; i++ {
		fn(&rs.tensors[ids[i]])
	}
}

func (rs *residency) set(m int, p int64, in bool) {
	if p < 0 || p >= int64(len(rs.state[m])) || rs.state[m][p] == in {
		return
	}
	rs.state[m][p] = in
	d := int64(-1)
	if in {
		d = 1
	}
	rs.each(m, p, func(t *event.Tensor) {
		rs.resident[t.ID] += d
		if t.Experts > 0 && t.ExpertStride > 0 {
			// Experts whose slice overlaps the page.
			lo := max(p*ps-t.Offset, 0)
			hi := min((p+1)*ps-t.Offset, t.Size)
			for e := lo / t.ExpertStride; e < int64(t.Experts) && e*t.ExpertStride < hi; e++ {
				rs.expertRes[t.ID][e] += d
			}
		}
	})
}

func (rs *residency) apply(ev *pageEv) {
	m := int(ev.model)
	for p := ev.first; p < ev.end && p < int64(len(rs.state[m])); p++ {
		if ev.add {
			if rs.evicted[m][p] && !rs.state[m][p] {
				if id, ok := rs.owner(m, p); ok {
					rs.refaults[id]++
				}
			}
			rs.set(m, p, true)
		} else {
			if rs.state[m][p] {
				rs.evicted[m][p] = true
			}
			rs.set(m, p, false)
		}
	}
}

// owner is the tensor holding page p's first byte.
func (rs *residency) owner(m int, p int64) (uint32, bool) {
	var id uint32
	ok := false
	rs.each(m, p, func(t *event.Tensor) {
		if !ok && t.Offset <= p*ps {
			id, ok = t.ID, true
		}
	})
	return id, ok
}

// expertResident reports whether expert e of every *_exps tensor of layer
// is wholly in the page cache.
func (rs *residency) expertResident(layerExps []uint32, e int) bool {
	for _, id := range layerExps {
		t := &rs.tensors[id]
		if e >= t.Experts {
			return false
		}
		if rs.expertRes[id][e] < rangePages(t.Offset+int64(e)*t.ExpertStride, t.ExpertStride) {
			return false
		}
	}
	return true
}

// replayPages replays the page cache's history in time order, taking
// the residency of every tensor at each token's start and the real hit
// rate of the router's picks against it.
func (r *run) replayPages(pages func(func(*pageEv) error) error) error {
	rs := newResidency(r.meta, r.st.Tensors)
	r.res = rs
	// Without page-cache events the recorder's snapshots are the state,
	// whatever was resident before the run (snapshots.go).
	snapshots := r.meta.PageCacheNA() != "" && len(r.opt.Snapshots) > 0
	if snapshots {
		for m := range rs.known {
			rs.known[m] = ""
		}
	}
	for _, why := range rs.known {
		if why != "" {
			r.realNA = why
		}
	}
	exps := r.expsByLayer()
	if len(exps) == 0 {
		r.realNA = "no MoE layers: the run's models have no *_exps tensors"
	}
	selsOf := map[uint32][]event.ExpertSel{}
	for _, s := range r.sels {
		selsOf[s.Token] = append(selsOf[s.Token], s)
	}
	r.realHits = map[[2]int]*[2]int{}
	order := make([]int, 0, len(r.tokens))
	for i, t := range r.tokens {
		if t.StartNS != 0 {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(r.tokens[a].StartNS, r.tokens[b].StartNS) })
	if !r.opt.NoTokenResidency {
		r.tokenRes = newTokenSnaps(len(r.tokens))
	}
	if snapshots {
		r.snapshotResidency(exps, selsOf)
		return r.snapErr
	}
	next := 0
	err := pages(func(ev *pageEv) error {
		for next < len(order) && r.tokens[order[next]].StartNS <= ev.ts {
			r.snapToken(order[next], exps, selsOf)
			next++
		}
		rs.apply(ev)
		return nil
	})
	for ; next < len(order); next++ {
		r.snapToken(order[next], exps, selsOf)
	}
	if err == nil {
		err = r.snapErr
	}
	return err
}

// snapToken takes token ti's residency from the state now, and counts its
// picks whose expert was wholly resident.
func (r *run) snapToken(ti int, exps map[int][]uint32, selsOf map[uint32][]event.ExpertSel) {
	rs := r.res
	if r.tokenRes != nil && r.snapErr == nil {
		r.snapErr = r.tokenRes.put(ti, rs.resident)
	}
	t := &r.tokens[ti]
	for _, s := range selsOf[t.Token] {
		ids := exps[int(s.Layer)]
		if len(ids) == 0 {
			continue
		}
		for _, k := range [][2]int{{int(s.Layer), int(t.Phase)}, {-1, int(t.Phase)}} {
			h := r.realHits[k]
			if h == nil {
				h = new([2]int)
				r.realHits[k] = h
			}
			h[1]++
			if rs.expertResident(ids, int(s.Expert)) {
				h[0]++
			}
		}
	}
}

// expsByLayer lists the *_exps tensor ids of each MoE layer.
func (r *run) expsByLayer() map[int][]uint32 {
	out := map[int][]uint32{}
	for i := range r.st.Tensors {
		t := &r.st.Tensors[i]
		if !t.Pseudo() && t.Experts > 0 && t.Layer >= 0 {
			out[t.Layer] = append(out[t.Layer], t.ID)
		}
	}
	return out
}

func (r *run) tokenWall(t *event.TokenInfo) (wall, stall uint64, ok bool) {
	if t.StartNS == 0 || t.EndNS < t.StartNS {
		return 0, 0, false
	}
	return t.EndNS - t.StartNS, r.stall[t.Token], true
}

const naNoTokens = "no tokens of this phase were recorded"
const naNoTime = "no token of this phase has llama_decode entry and return times"

func (r *run) perToken() Table {
	t := Table{Name: "per_token", Title: "per token (one llama_decode call), by phase"}
	t.Columns = []Column{{Name: "phase", Kind: String}, {Name: "tokens", Kind: Int}}
	type fig struct {
		name string
		get  func(*event.TokenInfo) (float64, bool)
	}
	figs := []fig{
		{"bytes_read_per_token_%s_bytes", func(x *event.TokenInfo) (float64, bool) { return float64(x.ReadBytes), true }},
		{"bytes_requested_per_token_%s_bytes", func(x *event.TokenInfo) (float64, bool) {
			return float64(x.RequestedBytes), r.readsNA == ""
		}},
		{"major_faults_per_token_%s_count", func(x *event.TokenInfo) (float64, bool) { return float64(x.Major), true }},
		{"fault_stall_per_token_%s_ns", func(x *event.TokenInfo) (float64, bool) { return float64(x.StallNS), true }},
		{"stall_share_per_token_%s_ratio", func(x *event.TokenInfo) (float64, bool) {
			wall, stall, ok := r.tokenWall(x)
			if !ok || wall == 0 {
				return 0, false
			}
			return float64(stall) / float64(wall), true
		}},
	}
	stats := []string{"mean", "p50", "p90", "p99", "max"}
	for _, f := range figs {
		for _, s := range stats {
			t.Columns = append(t.Columns, Column{Name: fmt.Sprintf(f.name, s), Kind: Float})
		}
	}
	t.Columns = append(t.Columns, Column{Name: "stall_share_ratio", Kind: Float})
	for _, ph := range phases {
		row := []Value{Str(ph.name)}
		var toks []*event.TokenInfo
		for i := range r.tokens {
			if ph.sel(r.tokens[i].Phase) {
				toks = append(toks, &r.tokens[i])
			}
		}
		row = append(row, I64(len(toks)))
		for _, f := range figs {
			if f.name == "bytes_requested_per_token_%s_bytes" && r.readsNA != "" {
				for range stats {
					row = append(row, NA(r.readsNA))
				}
				continue
			}
			var xs []float64
			for _, x := range toks {
				if v, ok := f.get(x); ok {
					xs = append(xs, v)
				}
			}
			if len(xs) == 0 {
				for range stats {
					row = append(row, NA(naNoTokens))
				}
				continue
			}
			d := Summarize(xs)
			row = append(row, F64(d.Mean, ""), F64(d.P50, ""), F64(d.P90, ""), F64(d.P99, ""), F64(d.Max, ""))
		}
		var wall, stall uint64
		for _, x := range toks {
			if w, s, ok := r.tokenWall(x); ok {
				wall += w
				stall += s
			}
		}
		row = append(row, ratio(float64(stall), float64(wall), naNoTime))
		t.add(row...)
	}
	return t
}

// tokenTime: time to first token is the prefill (every llama_decode
// before the first decode-phase call); time per output token the mean
// decode call. Stall is wall time with at least one fault in a model file
// in progress.
func (r *run) tokenTime() Table {
	t := Table{Name: "token_time", Title: "time to first token and per output token, compute vs I/O stall",
		Columns: cols("sfff", "figure", "time_ns", "compute_ns", "stall_ns")}
	var pw, psl, dw, dsl uint64
	var pn, dn int
	for i := range r.tokens {
		w, s, ok := r.tokenWall(&r.tokens[i])
		if !ok {
			continue
		}
		switch r.tokens[i].Phase {
		case event.PhasePrefill:
			pw, psl, pn = pw+w, psl+s, pn+1
		case event.PhaseDecode:
			dw, dsl, dn = dw+w, dsl+s, dn+1
		}
	}
	if pn == 0 {
		t.add(Str("time_to_first_token"), NA(naNoTime), NA(naNoTime), NA(naNoTime))
	} else {
		t.add(Str("time_to_first_token"), F64(float64(pw), ""), F64(float64(pw-psl), ""), F64(float64(psl), ""))
	}
	if dn == 0 {
		t.add(Str("time_per_output_token"), NA(naNoTime), NA(naNoTime), NA(naNoTime))
	} else {
		n := float64(dn)
		t.add(Str("time_per_output_token"), F64(float64(dw)/n, ""), F64(float64(dw-dsl)/n, ""), F64(float64(dsl)/n, ""))
	}
	return t
}

const naNoFaults = "nothing was requested: no page faults and no bytes read by read syscalls"

func (r *run) amplification() Table {
	t := Table{Name: "amplification", Title: "device reads against what faults asked for, by phase",
		Columns: cols("siiifi", "phase", "bytes_read_bytes", "faulted_bytes", "bytes_requested_bytes", "readahead_amplification_ratio", "block_requests")}
	for _, ph := range phases {
		var c event.Counters
		for i := range r.tokens {
			if ph.sel(r.tokens[i].Phase) {
				c.Add(&r.tokens[i].Counters)
			}
		}
		requested := NA(r.readsNA)
		if r.readsNA == "" {
			requested = I64(c.RequestedBytes)
		}
		// Device bytes against what the command asked for: the pages its
		// faults touched and the bytes its reads requested.
		t.add(Str(ph.name), I64(c.ReadBytes), I64(c.Faults*ps), requested,
			ratio(float64(c.ReadBytes), float64(c.Faults*ps+c.RequestedBytes), naNoFaults), I64(c.BlockReqs))
	}
	return t
}

// requestSizes: a power-of-two histogram of device read requests, and
// unique against total bytes and backward seeks in the model files.
func (r *run) requestSizes() Table {
	t := Table{Name: "device_reads", Title: "device read requests: size histogram (power-of-two buckets), unique bytes, backward seeks",
		Columns: cols("siif", "figure", "bucket_min_bytes", "value", "share_ratio")}
	hist := r.reqHist
	var ks []int
	for k := range hist {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	n := float64(r.reqs)
	for _, k := range ks {
		lo := int64(0)
		if k > 0 {
			lo = 1 << (k - 1)
		}
		t.add(Str("requests_of_size"), I64(lo), I64(hist[k]), F64(float64(hist[k])/n, ""))
	}
	var unique, total int64
	for _, u := range r.uniqueRd {
		unique += u * ps
	}
	for i := event.FirstTensor; int(i) < len(r.tensor); i++ {
		total += int64(r.tensor[i].ReadBytes)
	}
	t.add(Str("unique_bytes_read_pages_x4096"), NA("not a bucket"), I64(unique), ratio(float64(unique), float64(total), "no device reads of model tensors"))
	t.add(Str("total_bytes_read_model_tensors"), NA("not a bucket"), I64(total), ratio(float64(total), float64(total), "no device reads of model tensors"))
	back, pairs := r.backSeeks[0], r.backSeeks[1]
	t.add(Str("backward_seeks"), NA("not a bucket"), I64(back), ratio(float64(back), float64(pairs), "fewer than two consecutive read requests in one model file"))
	return t
}

func (r *run) resNA(m int) string {
	if m >= 0 && m < len(r.res.known) {
		return r.res.known[m]
	}
	return "not a model tensor"
}

// mincorePages counts the pages of [off, off+size) that the end-of-run
// mincore snapshot found resident.
func mincorePages(mf *rundir.ModelFile, off, size int64) int64 {
	lo, hi := off/ps, (off+size+ps-1)/ps
	var n int64
	for _, rg := range mf.ResidentEnd.Ranges {
		s, e := max(rg[0], lo), min(rg[1], hi)
		if s < e {
			n += e - s
		}
	}
	return n
}

const naNoMincore = "not measured: the run has no end-of-run mincore snapshot (recorded by an older iocorr, or mincore failed: see meta.json warnings)"

func (r *run) tensors() Table {
	t := Table{Name: "tensors", Title: "per tensor: amplification, refaults, residency at the end against mincore",
		Columns: cols("skssiiiiiiffiiifif", "tensor", "layer", "role", "device", "size_bytes", "bytes_read_bytes", "faults", "major_faults", "fault_stall_ns",
			"faulted_bytes", "readahead_amplification_ratio", "reread_amplification_ratio", "refault_pages",
			"pages", "resident_end_pages", "resident_end_share_ratio", "resident_end_mincore_pages", "resident_end_mincore_share_ratio")}
	for i := event.FirstTensor; int(i) < len(r.st.Tensors); i++ {
		x := &r.st.Tensors[i]
		c := &r.tensor[i]
		pages := rangePages(x.Offset, x.Size)
		// Where the weight lived (llama.cpp's buffer name); NA, with why,
		// where that was not measured.
		dev := Str(x.DeviceName())
		if why := event.DeviceNA(x.DeviceName()); why != "" {
			dev = NA(why)
		}
		row := []Value{Str(x.Name), I64(x.Layer), Str(x.Role), dev, I64(x.Size), I64(c.ReadBytes), I64(c.Faults), I64(c.Major), I64(c.StallNS),
			I64(c.Faults * ps), ratio(float64(c.ReadBytes), float64(c.Faults*ps), naNoFaults), ratio(float64(c.ReadBytes), float64(x.Size), "empty tensor")}
		if why := r.resNA(x.Model); r.refaultsFromReads {
			// The default tier: refaults from device reads; the state at
			// the end is mincore's alone.
			refaults := I64(r.res.refaults[i])
			if r.res.refaultNA != "" {
				refaults = NA(r.res.refaultNA)
			}
			end := r.meta.PageCacheNA()
			row = append(row, refaults, I64(pages), NA(end), NA(end))
		} else if why != "" {
			row = append(row, NA(why), I64(pages), NA(why), NA(why))
		} else {
			row = append(row, I64(r.res.refaults[i]), I64(pages), I64(r.res.resident[i]), ratio(float64(r.res.resident[i]), float64(pages), "empty tensor"))
		}
		if mf := &r.meta.Models[x.Model]; mf.ResidentEnd == nil {
			row = append(row, NA(naNoMincore), NA(naNoMincore))
		} else {
			n := mincorePages(mf, x.Offset, x.Size)
			row = append(row, I64(n), ratio(float64(n), float64(pages), "empty tensor"))
		}
		t.add(row...)
	}
	return t
}

func (r *run) layers() Table {
	t := Table{Name: "layers", Title: "per layer: bytes read against its size (re-read amplification)",
		Columns: cols("kiif", "layer", "size_bytes", "bytes_read_bytes", "reread_amplification_ratio")}
	size, read := map[int]int64{}, map[int]uint64{}
	for i := event.FirstTensor; int(i) < len(r.st.Tensors); i++ {
		x := &r.st.Tensors[i]
		size[x.Layer] += x.Size
		read[x.Layer] += r.tensor[i].ReadBytes
	}
	var ls []int
	for l := range size {
		ls = append(ls, l)
	}
	slices.Sort(ls)
	for _, l := range ls {
		t.add(I64(l), I64(size[l]), I64(read[l]), ratio(float64(read[l]), float64(size[l]), "empty layer"))
	}
	return t
}

// residencyPerToken is the table of a row per token × tensor. Its rows
// are made as they are read, from the snapshots kept aside, so that no
// caller holds them all.
func (r *run) residencyPerToken() Table {
	t := Table{Name: "residency", Title: "per token × tensor: pages resident at the token's start", Long: true,
		Columns: cols("isiif", "token", "tensor", "resident_pages", "pages", "resident_share_ratio")}
	t.each = func(yield func([]Value) error) error {
		snap := make([]int64, len(r.st.Tensors))
		row := make([]Value, len(t.Columns))
		for ti := range r.tokens {
			ok, err := r.tokenRes.get(ti, snap)
			if err != nil {
				return err
			}
			for i := event.FirstTensor; int(i) < len(r.st.Tensors); i++ {
				x := &r.st.Tensors[i]
				pages := rangePages(x.Offset, x.Size)
				row[0], row[1], row[3] = I64(r.tokens[ti].Token), Str(x.Name), I64(pages)
				switch why := r.resNA(x.Model); {
				case why != "":
					row[2], row[4] = NA(why), NA(why)
				case !ok && r.tokenResNA != "":
					row[2], row[4] = NA(r.tokenResNA), NA(r.tokenResNA)
				case !ok:
					row[2], row[4] = NA(naNoTime), NA(naNoTime)
				default:
					row[2], row[4] = I64(snap[i]), ratio(float64(snap[i]), float64(pages), "empty tensor")
				}
				if err := yield(row); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return t
}

func (r *run) top() Table {
	t := Table{Name: "top_tensors", Title: "top tensors by bytes read, stall and faults",
		Columns: cols("sisiii", "by", "rank", "tensor", "bytes_read_bytes", "fault_stall_ns", "faults")}
	for _, by := range []struct {
		name string
		get  func(*event.Counters) uint64
	}{
		{"bytes_read_bytes", func(c *event.Counters) uint64 { return c.ReadBytes }},
		{"fault_stall_ns", func(c *event.Counters) uint64 { return c.StallNS }},
		{"faults", func(c *event.Counters) uint64 { return c.Faults }},
	} {
		var ids []int
		for i := range r.tensor {
			if by.get(&r.tensor[i]) > 0 {
				ids = append(ids, i)
			}
		}
		slices.SortStableFunc(ids, func(a, b int) int { return cmp.Compare(by.get(&r.tensor[b]), by.get(&r.tensor[a])) })
		for k, i := range ids[:min(len(ids), r.opt.Top)] {
			c := &r.tensor[i]
			t.add(Str(by.name), I64(k+1), Str(r.st.TensorName(uint32(i))), I64(c.ReadBytes), I64(c.StallNS), I64(c.Faults))
		}
	}
	return t
}
