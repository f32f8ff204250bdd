// Package perfetto writes a recorded run as a Perfetto trace (the
// protobuf TrackEvent format; ui.perfetto.dev opens it): a track per
// traced thread with its llama_decode calls, ggml graphs and ops as
// slices and its page faults as instants; block requests as slices on
// per-device tracks; counters of resident pages, device bytes and
// per-layer bytes; flows from a major fault to the block request that
// read its page.
//
// Timestamps are the run's CLOCK_MONOTONIC nanoseconds, written as
// Perfetto's default clock: the timeline is exact relative to itself.
package perfetto

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/extsort"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/varint"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

// Options bound the trace.
type Options struct {
	// MaxInstants is how many fault instants a trace holds; past it the
	// faults become per-thread counters per Interval, and the Summary
	// says so (the UI keeps a trace in ~2 GB of memory). 0: 1,000,000.
	MaxInstants int
	// Interval is the bucket of the counter tracks. 0: 10 ms.
	Interval uint64
}

// Summary counts what the trace holds, for the caller to report.
type Summary struct {
	Tokens, Graphs, Ops   int    // slices
	ThreadStates          int    // slices of threads' scheduler states (--probe sched)
	BlockedNS             uint64 // time traced threads spent blocked in D state
	Faults                int    // fault instants (0 when downsampled)
	BlockRequests         int    // slices
	Reads                 int    // read calls of model files, slices
	Flows                 int    // fault → block request
	CounterTracks         int
	Downsampled           string   // why and how, "" when every fault is an instant
	NotInTrace            []string // what the run did not record, with why
	Packets, TrackPackets int
}

// pageSize is the page the page-cache events count in.
const pageSize = kernel.PageSize

// Export writes the recorded run to w.
func Export(w io.Writer, recorded *store.Run, opt Options) (Summary, error) {
	b := newBuilder(recorded.Store, recorded.Meta, opt)
	defer b.events.Close()
	if err := b.build(); err != nil {
		return Summary{}, err
	}
	return b.sum, b.write(w)
}

func newBuilder(st *store.Store, meta *rundir.Meta, opt Options) *builder {
	if opt.MaxInstants <= 0 {
		opt.MaxInstants = 1_000_000
	}
	if opt.Interval == 0 {
		opt.Interval = 10_000_000
	}
	return &builder{st: st, meta: meta, opt: opt, threads: map[uint32]*track{}, procs: map[uint32]*track{},
		tgidOf: map[uint32]uint32{}, comm: map[uint32]string{}, next: 1, events: newEventSort()}
}

// build reads the store into tracks and events: the timeline's calls,
// graphs and ops, the I/O events, then the threads' states.
func (b *builder) build() error {
	if err := b.readTimeline(); err != nil {
		return err
	}
	b.llamaSlices()
	if err := b.storeEvents(); err != nil {
		return err
	}
	if !b.meta.HasProbeSet(rundir.ProbeSetOps) {
		b.sum.NotInTrace = append(b.sum.NotInTrace, "ops: recorded only with --probe ops")
	}
	if why := b.meta.FaultDetailNA(); why != "" {
		// Their counts are in every table; a trace draws instants.
		b.sum.NotInTrace = append(b.sum.NotInTrace, "each fault outside the model files: "+why)
		b.emit(trackEvent{ts: 0, track: b.noteTrack().uuid, typ: typeInstant, name: "faults outside the model files not drawn",
			anns: []annotation{annS("why", why)}})
	}
	b.threadStates()
	if !b.meta.HasProbeSet(rundir.ProbeSetSched) {
		b.sum.NotInTrace = append(b.sum.NotInTrace, "thread states: recorded only with --probe sched")
	}
	return nil
}

type builder struct {
	st   *store.Store
	meta *rundir.Meta
	opt  Options
	sum  Summary

	tracks  []*track
	threads map[uint32]*track // by tid
	procs   map[uint32]*track // by tgid
	tgidOf  map[uint32]uint32
	comm    map[uint32]string // by tgid, from exec events
	next    uint64            // next track uuid

	decodes []threadSlice
	sched   []event.Mark // switches and wakeups
	lastTS  uint64
	graphs  []threadSlice
	ops     []threadSlice
	events  *extsort.Sorter[trackEvent] // every event made, in time order once sorted
	err     error                       // the first error of the sort
}

// threadSlice is a recorded decode call, graph or op; a graph or op has
// only its start in the recording (probes on entry): its end is the
// next one's start on its thread, or the end of what holds it.
type threadSlice struct {
	tid        uint32
	start, end uint64
	name       string
	anns       []annotation
}

// readTimeline reads the store's timeline marks: threads' processes,
// commands, decode calls, graphs, ops and scheduler records.
func (b *builder) readTimeline() error {
	open := map[uint32]event.Mark{} // decode calls begun, by thread
	graphAt := map[uint32]int{}     // the last graph begun, by thread: its index in b.graphs
	err := b.st.Marks(func(m *event.Mark) error {
		switch m.Kind {
		case event.MarkEnd:
			b.lastTS = m.Ts
		case event.MarkSwitch, event.MarkWakeup:
			b.sched = append(b.sched, *m)
		case event.MarkThread:
			b.tgidOf[m.Tid] = m.Tgid
		case event.MarkExec:
			b.comm[m.Tgid] = m.Name
		case event.MarkDecodeBegin:
			open[m.Tid] = *m
		case event.MarkDecodeEnd:
			start := m.Begin
			if beg, ok := open[m.Tid]; ok {
				start = beg.Begin
				delete(open, m.Tid)
			}
			b.decodes = append(b.decodes, threadSlice{tid: m.Tid, start: start, end: m.Ts,
				name: fmt.Sprintf("token %d", m.Token),
				anns: []annotation{annU("token", uint64(m.Token)), annS("phase", event.PhaseName(m.Phase)),
					annI("n_tokens", int64(m.NTokens)), annI("ret", int64(m.Ret))}})
		case event.MarkGraphEnd:
			// Its measured end (ggml_graph_compute's return).
			if i, ok := graphAt[m.Tid]; ok && b.graphs[i].start == m.Begin {
				b.graphs[i].end = m.Ts
			}
		case event.MarkGraph:
			graphAt[m.Tid] = len(b.graphs)
			b.graphs = append(b.graphs, threadSlice{tid: m.Tid, start: m.Ts, name: fmt.Sprintf("graph %d", m.Seq),
				anns: []annotation{annU("nodes", uint64(m.Nodes)), annU("weight_nodes", uint64(m.WeightNodes)),
					annU("token", uint64(m.Token))}})
		case event.MarkOp:
			name := "op"
			if int(m.Op) < len(b.meta.OpNames) {
				name = b.meta.OpNames[m.Op]
			}
			b.ops = append(b.ops, threadSlice{tid: m.Tid, start: m.Ts, name: name,
				anns: []annotation{annS("node", m.Name), annU("token", uint64(m.Token))}})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading the timeline: %w", err)
	}
	// A call still open when recording stopped ends at its last event.
	for _, tid := range slices.Sorted(maps.Keys(open)) {
		d := open[tid]
		b.decodes = append(b.decodes, threadSlice{tid: tid, start: d.Begin, end: d.Begin + 1,
			name: fmt.Sprintf("token %d (unfinished)", d.Token)})
	}
	return nil
}

// Scheduler states (struct task_struct's __state bits).
const (
	taskInterruptible   = 0x1
	taskUninterruptible = 0x2
)

// threadStates draws each traced thread's scheduler states as slices on
// a child track of it: running from a switch in to the switch out; then
// runnable (preempted), sleeping (S) or blocked in D state (waiting on
// I/O, as a fault that reads its page does) until a wakeup makes it
// runnable, and runnable until it is switched in again.
func (b *builder) threadStates() {
	traced := map[uint32]bool{}
	for _, tgid := range b.tgidOf {
		traced[tgid] = true
	}
	type state struct {
		name  string
		since uint64
		tr    *track
	}
	states := map[uint32]*state{}
	set := func(tid, tgid uint32, ts uint64, name string) {
		if !traced[tgid] {
			return
		}
		if _, ok := b.tgidOf[tid]; !ok {
			b.tgidOf[tid] = tgid
		}
		st := states[tid]
		if st == nil {
			st = &state{tr: b.childTrack(b.threadTrack(tid), "thread state")}
			states[tid] = st
		} else if st.name != "" {
			b.slice(st.tr, st.since, ts, st.name, "sched", nil, nil)
			b.sum.ThreadStates++
			if st.name == stateBlocked {
				b.sum.BlockedNS += ts - st.since
			}
		}
		st.name, st.since = name, ts
	}
	for i := range b.sched {
		e := &b.sched[i]
		switch e.Kind {
		case event.MarkSwitch:
			out := stateRunnable
			switch {
			case e.PrevState&taskUninterruptible != 0:
				out = stateBlocked
			case e.PrevState&taskInterruptible != 0:
				out = stateSleeping
			case e.PrevState != 0:
				out = fmt.Sprintf("state %#x", e.PrevState)
			}
			set(e.Tid, e.Tgid, e.Ts, out)
			set(e.NextTid, e.NextTgid, e.Ts, stateRunning)
		case event.MarkWakeup:
			if st := states[e.Tid]; st == nil || st.name != stateRunning {
				set(e.Tid, e.Tgid, e.Ts, stateRunnable)
			}
		}
	}
	// A thread's last state lasts until the recording's last event (or
	// its exit, which is a switch out).
	for _, tid := range slices.Sorted(maps.Keys(states)) {
		if st := states[tid]; st.name != "" && b.lastTS > st.since {
			set(tid, b.tgidOf[tid], b.lastTS, "")
		}
	}
}

// The thread states' slice names.
const (
	stateRunning  = "running"
	stateRunnable = "runnable"
	stateSleeping = "sleeping (S)"
	stateBlocked  = "blocked on I/O (D)"
)

// process and thread tracks, made on first use.
func (b *builder) procTrack(tgid uint32) *track {
	if t := b.procs[tgid]; t != nil {
		return t
	}
	t := &track{uuid: b.newUUID(), pid: int32(tgid), name: b.comm[tgid]}
	if t.name == "" {
		t.name = fmt.Sprintf("pid %d", tgid)
	}
	b.procs[tgid] = t
	b.tracks = append(b.tracks, t)
	return t
}

func (b *builder) threadTrack(tid uint32) *track {
	if t := b.threads[tid]; t != nil {
		return t
	}
	tgid := b.tgidOf[tid]
	if tgid == 0 {
		tgid = tid
	}
	p := b.procTrack(tgid)
	t := &track{uuid: b.newUUID(), parent: p.uuid, pid: int32(tgid), tid: int32(tid), thread: true,
		name: fmt.Sprintf("%s %d", p.name, tid)}
	b.threads[tid] = t
	b.tracks = append(b.tracks, t)
	return t
}

func (b *builder) childTrack(parent *track, name string) *track {
	t := &track{uuid: b.newUUID(), parent: parent.uuid, name: name}
	b.tracks = append(b.tracks, t)
	return t
}

func (b *builder) newUUID() uint64 {
	b.next++
	return b.next
}

// slice adds a begin and an end; an empty slice lasts 1 ns so that its
// end sorts after its begin.
func (b *builder) slice(tr *track, start, end uint64, name, cat string, anns []annotation, endFlows []uint64) {
	end = max(end, start+1)
	b.emit(trackEvent{ts: start, track: tr.uuid, typ: typeSliceBegin, name: name, category: cat, anns: anns, endFlows: endFlows})
	b.emit(trackEvent{ts: end, track: tr.uuid, typ: typeSliceEnd})
}

// llamaSlices puts decode calls on their thread's track, graphs and ops
// on child tracks of it ("ggml graphs", "ggml ops"), each ending where
// the next begins on that thread or where what holds it ends.
func (b *builder) llamaSlices() {
	byTid := func(ss []threadSlice) map[uint32][]threadSlice {
		m := map[uint32][]threadSlice{}
		for _, s := range ss {
			m[s.tid] = append(m[s.tid], s)
		}
		for _, v := range m {
			slices.SortStableFunc(v, func(a, b threadSlice) int { return cmp.Compare(a.start, b.start) })
		}
		return m
	}
	decodes, graphs, ops := byTid(b.decodes), byTid(b.graphs), byTid(b.ops)
	// holderEnd: the end of the slice in holders that contains ts, or 0.
	holderEnd := func(holders []threadSlice, ts uint64) uint64 {
		i, _ := slices.BinarySearchFunc(holders, ts, func(s threadSlice, t uint64) int { return cmp.Compare(s.start, t+1) })
		if i > 0 && holders[i-1].end >= ts {
			return holders[i-1].end
		}
		return 0
	}
	close := func(ss, holders []threadSlice) {
		for i := range ss {
			if ss[i].end != 0 {
				continue // measured: a graph whose return was recorded
			}
			end := holderEnd(holders, ss[i].start)
			if i+1 < len(ss) && (end == 0 || ss[i+1].start < end) {
				end = ss[i+1].start
			}
			if end == 0 {
				end = ss[i].start + 1 // the last one, outside any holder
			}
			ss[i].end = end
		}
	}
	// Threads in order: their tracks are numbered as they are made.
	for _, tid := range slices.Sorted(maps.Keys(decodes)) {
		tr := b.threadTrack(tid)
		for _, d := range decodes[tid] {
			b.slice(tr, d.start, d.end, d.name, ggml.SymDecode, d.anns, nil)
			b.sum.Tokens++
		}
	}
	b.nested(graphs, decodes, close, "ggml graphs", ggml.SymGraphCompute, &b.sum.Graphs)
	b.nested(ops, graphs, close, "ggml ops", "ggml op", &b.sum.Ops)
}

// nested writes the slices of each thread, in thread order, on a child
// track of the thread's named track, each closed by close within its
// holders (the thread's slices it nests in), and counts them in n.
func (b *builder) nested(byThread, holders map[uint32][]threadSlice, close func(ss, holders []threadSlice), track, cat string, n *int) {
	for _, tid := range slices.Sorted(maps.Keys(byThread)) {
		ss := byThread[tid]
		close(ss, holders[tid])
		tr := b.childTrack(b.threadTrack(tid), track)
		for _, s := range ss {
			b.slice(tr, s.start, s.end, s.name, cat, s.anns, nil)
			(*n)++
		}
	}
}

// request is one block request, put together from its per-tensor slices.
type request struct {
	issue, done uint64
	bytes       uint64
	write       bool
	unseen      bool     // its completion never reached BPF: no latency
	dev         int      // model index whose device, -1 other
	flows       []uint64 // of the major faults it served
}

// readCall is one read call of a model file, put together from its
// per-tensor slices.
type readCall struct {
	tid         uint32
	start, end  uint64
	bytes       uint64
	kind        uint8
	first, last string // tensors
}

// series are the counter tracks' values: per series, per bucket of
// Options.Interval, a sum (a rate) or the last value (a gauge), series in
// order of first sight. The points go through an external sort by series
// and bucket: a bucket per 10 ms is a run's duration, not its size, and a
// long run has hundreds of thousands.
type series struct {
	interval uint64
	order    []string
	index    map[string]uint32
	points   *extsort.Sorter[seriesPoint]
	err      error // the first error of the sort
}

// seriesPoint is one value added to a series' bucket.
type seriesPoint struct {
	series uint32
	bucket uint64
	v      int64
}

var seriesPointCodec = extsort.Ints(3, func(p *seriesPoint) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{int64(p.series), int64(p.bucket), p.v}
}, func(p *seriesPoint, a [extsort.MaxInts]int64) {
	p.series, p.bucket, p.v = uint32(a[0]), uint64(a[1]), a[2]
})

func newSeries(interval uint64) *series {
	return &series{interval: interval, index: map[string]uint32{},
		points: extsort.New(eventBatch, func(x, y *seriesPoint) int {
			return cmp.Or(cmp.Compare(x.series, y.series), cmp.Compare(x.bucket, y.bucket))
		}, seriesPointCodec)}
}

// add adds v to name's bucket of ts; a gauge's bucket keeps its last
// value (the sort is stable: the last added comes last).
func (s *series) add(name string, ts uint64, v int64, gauge bool) {
	i, ok := s.index[name]
	if !ok {
		i = uint32(len(s.order))
		s.index[name] = i
		s.order = append(s.order, name)
	}
	if s.err == nil {
		s.err = s.points.Add(seriesPoint{series: i, bucket: ts / s.interval, v: v})
	}
}

// storeEvents draws the store's events: fault instants (or per-thread
// counters when there are too many), block requests with flows from the
// major faults they served, read calls, and the counter tracks. Each is
// a pass over the store in its order; what needs another order (the
// fault → request join, requests by issue) goes through an external sort.
func (b *builder) storeEvents() error {
	sc, err := b.scanStore()
	if err != nil {
		return err
	}
	defer sc.keys.Close()
	defer sc.series.points.Close()
	var byFault, byReq *extsort.Sorter[flow]
	downsample := sc.nFaults > b.opt.MaxInstants
	if downsample {
		if err := b.faultCounters(sc.nFaults); err != nil {
			return err
		}
	} else {
		if byFault, byReq, err = b.linkFlows(sc.keys); err != nil {
			return err
		}
		defer byFault.Close()
		defer byReq.Close()
		if err := b.faultInstants(byFault); err != nil {
			return err
		}
	}
	reqs, err := b.requests(byReq)
	if err != nil {
		return err
	}
	defer reqs.Close()
	if err := b.blockSlices(reqs); err != nil {
		return fmt.Errorf("reading events: %w", err)
	}
	b.readSlices(sc.reads)
	return b.counterTracks(sc.series)
}

// storeScan is what the first pass over the store's events gathers.
type storeScan struct {
	nFaults int
	reads   []readCall
	series  *series // resident pages per model, device bytes and per-layer bytes read
	keys    *extsort.Sorter[joinKey]
}

// joinKey is a major fault's page, or a run of pages a read request
// read, for the fault → request join.
type joinKey struct {
	page, end   int64  // model<<48 | page; a request's run ends at end
	req         bool   // a request's pages, else a fault's page
	idx         uint32 // the fault's or the request's number in store order
	start, stop uint64 // a fault's start and end, a request's issue and completion
}

var joinKeyCodec = extsort.Ints(6, func(k *joinKey) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{k.page, k.end, extsort.Bool(k.req), int64(k.idx), int64(k.start), int64(k.stop)}
}, func(k *joinKey, a [extsort.MaxInts]int64) {
	k.page, k.end, k.req, k.idx, k.start, k.stop = a[0], a[1], a[2] == 1, uint32(a[3]), uint64(a[4]), uint64(a[5])
})

// flow joins fault number fault to request number req.
type flow struct{ fault, req uint32 }

var flowCodec = extsort.Ints(2, func(f *flow) [extsort.MaxInts]int64 {
	return [extsort.MaxInts]int64{int64(f.fault), int64(f.req)}
}, func(f *flow, a [extsort.MaxInts]int64) {
	f.fault, f.req = uint32(a[0]), uint32(a[1])
})

// scanStore reads every record once: it counts faults, collects read
// calls and the counters' values, and writes the join's keys.
func (b *builder) scanStore() (*storeScan, error) {
	sc := &storeScan{series: newSeries(b.opt.Interval),
		keys: extsort.New(eventBatch, func(x, y *joinKey) int {
			// At one page a request's run opens before a fault looks for it.
			return cmp.Or(cmp.Compare(x.page, y.page), cmp.Compare(boolRank(!x.req), boolRank(!y.req)))
		}, joinKeyCodec)}
	resident := make([]int64, len(b.meta.Models))
	for i, m := range b.meta.Models {
		resident[i] = int64(m.ResidentBefore)
	}
	var reqs uint32
	err := b.st.Records(store.EventFilter{}, func(rec []event.Event) error {
		switch rec[0].Kind {
		case event.KindFault:
			for i := range rec {
				e := &rec[i]
				idx := uint32(sc.nFaults)
				sc.nFaults++
				if m, off, ok := event.FileOffset(b.st.Tensors, e); ok && e.Class == event.ClassMajor && m >= 0 {
					pg := int64(m)<<48 | off/pageSize
					if err := sc.keys.Add(joinKey{page: pg, end: pg + 1, idx: idx, start: e.Ts - e.Dur, stop: e.Ts}); err != nil {
						return err
					}
				}
			}
		case event.KindBlock:
			idx := reqs
			reqs++
			return b.blockSums(rec, sc, idx)
		case event.KindRead:
			first, last := b.st.TensorName(rec[0].Tensor), b.st.TensorName(rec[len(rec)-1].Tensor)
			r := readCall{tid: rec[0].Tid, start: rec[0].Ts - rec[0].Dur, end: rec[0].Ts, kind: rec[0].Class, first: first, last: last}
			for _, e := range rec {
				r.bytes += e.Bytes
			}
			sc.reads = append(sc.reads, r)
		case event.KindPageAdd, event.KindPageDel:
			for i := range rec {
				e := &rec[i]
				m, _, ok := event.FileOffset(b.st.Tensors, e)
				if !ok {
					continue
				}
				d := int64(e.Bytes / pageSize)
				if e.Kind == event.KindPageDel {
					d = -d
				}
				resident[m] += d
				sc.series.add(fmt.Sprintf("resident pages of %s", filepath.Base(b.meta.Models[m].Path)), e.Ts, resident[m], true)
			}
		}
		return nil
	})
	if err != nil {
		sc.keys.Close()
		return nil, fmt.Errorf("reading events: %w", err)
	}
	return sc, nil
}

func boolRank(v bool) int {
	if v {
		return 1
	}
	return 0
}

// blockSums counts a block request's read bytes in the device's and its
// layers' series, and writes the pages a read read as join keys.
func (b *builder) blockSums(rec []event.Event, sc *storeScan, idx uint32) error {
	write := event.BlockWrite(rec[0].Class)
	issue, done := rec[0].Ts-rec[0].Dur, rec[0].Ts
	for i := range rec {
		e := &rec[i]
		if m, off, ok := event.FileOffset(b.st.Tensors, e); ok {
			if !write {
				pg := int64(m) << 48
				k := joinKey{page: pg | off/pageSize, end: pg | (off+int64(e.Bytes)+pageSize-1)/pageSize, req: true, idx: idx, start: issue, stop: done}
				if k.end > k.page {
					if err := sc.keys.Add(k); err != nil {
						return err
					}
				}
				if t := &b.st.Tensors[e.Tensor]; t.Layer >= 0 {
					sc.series.add(fmt.Sprintf("layer %d bytes read", t.Layer), e.Ts, int64(e.Bytes), false)
				}
			}
		}
		if !write {
			sc.series.add("device bytes read", e.Ts, int64(e.Bytes), false)
		}
	}
	return nil
}

// linkFlows joins each major fault to the request that read its page: of
// the read requests issued and completed within the fault, the first in
// store order. It sweeps the keys by page, holding the requests whose
// pages cover the current one (the re-reads of one page), and returns the
// flows by fault and by request then fault.
func (b *builder) linkFlows(keys *extsort.Sorter[joinKey]) (byFault, byReq *extsort.Sorter[flow], err error) {
	byFault = extsort.New(eventBatch, func(x, y *flow) int { return cmp.Compare(x.fault, y.fault) }, flowCodec)
	byReq = extsort.New(eventBatch, func(x, y *flow) int { return cmp.Or(cmp.Compare(x.req, y.req), cmp.Compare(x.fault, y.fault)) }, flowCodec)
	var active []joinKey // request runs that may cover the current page
	live := 0            // how many were left at the last pruning
	prune := func(page int64) {
		// Keys come by page: a run ending at or before page covers no
		// fault to come.
		kept := active[:0]
		for _, r := range active {
			if r.end > page {
				kept = append(kept, r)
			}
		}
		active, live = kept, len(kept)
	}
	err = keys.Each(func(k *joinKey) error {
		if k.req {
			active = append(active, *k)
			// Runs pile up between faults far apart: pruning when they
			// double keeps the set to the runs covering this page.
			if len(active) > 2*live+64 {
				prune(k.page)
			}
			return nil
		}
		prune(k.page)
		best, found := uint32(0), false
		for _, r := range active {
			if r.page <= k.page && r.start >= k.start && r.stop <= k.stop && (!found || r.idx < best) {
				best, found = r.idx, true
			}
		}
		if !found {
			return nil
		}
		b.sum.Flows++
		f := flow{fault: k.idx, req: best}
		if err := byFault.Add(f); err != nil {
			return err
		}
		return byReq.Add(f)
	})
	if err != nil {
		byFault.Close()
		byReq.Close()
		return nil, nil, fmt.Errorf("linking faults to block requests: %w", err)
	}
	return byFault, byReq, nil
}

// requests puts each block request together, with the flows of the faults
// it served, into a sort by issue: requests in flight at once go on lanes
// in that order.
func (b *builder) requests(byReq *extsort.Sorter[flow]) (*extsort.Sorter[request], error) {
	reqs := extsort.New(eventBatch, func(x, y *request) int { return cmp.Compare(x.issue, y.issue) }, requestCodec)
	cur := pull(byReq)
	next := cur.next
	f, more := next()
	var idx uint32
	err := b.st.Records(store.EventFilter{}, func(rec []event.Event) error {
		if rec[0].Kind != event.KindBlock {
			return nil
		}
		r := request{issue: rec[0].Ts - rec[0].Dur, done: rec[0].Ts, write: event.BlockWrite(rec[0].Class),
			unseen: rec[0].CompletionUnseen(), dev: -1}
		for i := range rec {
			e := &rec[i]
			r.bytes += e.Bytes
			if m, _, ok := event.FileOffset(b.st.Tensors, e); ok && r.dev < 0 {
				r.dev = m
			}
		}
		for ; more && f.req == idx; f, more = next() {
			r.flows = append(r.flows, uint64(f.fault)+1)
		}
		idx++
		return reqs.Add(r)
	})
	if cerr := cur.close(); err == nil {
		err = cerr
	}
	if err != nil {
		reqs.Close()
		return nil, fmt.Errorf("reading events: %w", err)
	}
	return reqs, nil
}

var requestCodec = extsort.Codec[request]{
	Append: func(b []byte, r *request) []byte {
		b = binary.AppendUvarint(b, r.issue)
		b = binary.AppendUvarint(b, r.done)
		b = binary.AppendUvarint(b, r.bytes)
		var flags byte
		if r.write {
			flags |= 1
		}
		if r.unseen {
			flags |= 2
		}
		b = append(b, flags)
		b = binary.AppendVarint(b, int64(r.dev))
		return appendIDs(b, r.flows)
	},
	Decode: func(b []byte, q *request) error {
		r := varint.Reader{B: b}
		q.issue, q.done, q.bytes = r.Uvarint(), r.Uvarint(), r.Uvarint()
		flags := r.Byte()
		q.write, q.unseen = flags&1 != 0, flags&2 != 0
		q.dev = int(r.Varint())
		q.flows = ids(&r)
		return whole(&r)
	},
}

// flowCursor reads sorted flows one at a time, beside a pass over the
// store (nil-safe: a nil sorter has none).
type flowCursor struct {
	next func() (flow, bool)
	stop func()
	err  error
}

var errStopped = errors.New("stopped")

func pull(s *extsort.Sorter[flow]) *flowCursor {
	c := &flowCursor{next: func() (flow, bool) { return flow{}, false }, stop: func() {}}
	if s == nil {
		return c
	}
	c.next, c.stop = iter.Pull(func(yield func(flow) bool) {
		err := s.Each(func(f *flow) error {
			if !yield(*f) {
				return errStopped
			}
			return nil
		})
		if err != nil && !errors.Is(err, errStopped) {
			c.err = err
		}
	})
	return c
}

// close stops the cursor and returns the sort's error, if any.
func (c *flowCursor) close() error {
	c.stop()
	return c.err
}

// faultCounters draws each thread's faults as a counter per interval, when
// they are too many to be instants, and says so on the run's track.
func (b *builder) faultCounters(nFaults int) error {
	b.sum.Downsampled = fmt.Sprintf("%d faults are more than the %d instants a trace holds here: each thread's faults are a counter per %d ms instead", nFaults, b.opt.MaxInstants, b.opt.Interval/1_000_000)
	counts := map[[2]uint64]int64{}
	err := b.st.Events(store.EventFilter{}, func(e *event.Event) error {
		if e.Kind == event.KindFault {
			counts[[2]uint64{uint64(e.Tid), e.Ts / b.opt.Interval}]++
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading events: %w", err)
	}
	tracks := map[uint32]*track{}
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b [2]uint64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	for _, k := range keys {
		tid := uint32(k[0])
		tr := tracks[tid]
		if tr == nil {
			tr = b.childTrack(b.threadTrack(tid), "page faults per interval")
			tr.counterUnit = unitCount
			tracks[tid] = tr
			b.sum.CounterTracks++
		}
		b.emit(trackEvent{ts: k[1] * b.opt.Interval, track: tr.uuid, typ: typeCounter, counter: counts[k]})
	}
	b.emit(trackEvent{ts: 0, track: b.noteTrack().uuid, typ: typeInstant, name: "faults downsampled",
		anns: []annotation{annS("why", b.sum.Downsampled)}})
	return nil
}

// faultInstants draws each fault as an instant on its thread's track,
// with the flow to the request that served it.
func (b *builder) faultInstants(byFault *extsort.Sorter[flow]) error {
	cur := pull(byFault)
	next := cur.next
	f, more := next()
	var idx uint32
	err := b.st.Records(store.EventFilter{}, func(rec []event.Event) error {
		if rec[0].Kind != event.KindFault {
			return nil
		}
		for i := range rec {
			e := &rec[i]
			m, off, _ := event.FileOffset(b.st.Tensors, e)
			anns := []annotation{annS("class", e.ClassName()), annS("tensor", b.st.TensorName(e.Tensor)),
				annU("latency_ns", e.Dur), annU("token", uint64(e.Token))}
			if e.Expert >= 0 {
				anns = append(anns, annI("expert", int64(e.Expert)))
			}
			if m >= 0 {
				anns = append(anns, annI("file_offset", off))
			}
			var flows []uint64
			if more && f.fault == idx {
				flows = []uint64{uint64(idx) + 1}
				f, more = next()
			}
			b.emit(trackEvent{ts: e.Ts - e.Dur, track: b.threadTrack(e.Tid).uuid, typ: typeInstant,
				name: e.ClassName() + " fault", category: "page fault", anns: anns, flows: flows})
			b.sum.Faults++
			idx++
		}
		return nil
	})
	if cerr := cur.close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("reading events: %w", err)
	}
	return nil
}

// readSlices draws read calls on lanes of their thread's "read calls"
// tracks (the io_uring reads of one thread may overlap).
func (b *builder) readSlices(reads []readCall) {
	readLanes := map[uint32][]*lane{}
	for _, r := range reads {
		ls := readLanes[r.tid]
		tr := b.lane(&ls, b.threadTrack(r.tid), "read calls", r.start, r.end)
		readLanes[r.tid] = ls
		anns := []annotation{annU("bytes", r.bytes), annS("call", event.ReadKindName(r.kind)), annS("first_tensor", r.first), annS("last_tensor", r.last)}
		b.slice(tr, r.start, r.end, fmt.Sprintf("%s %d KiB", event.ReadKindName(r.kind), r.bytes>>10), "read", anns, nil)
		b.sum.Reads++
	}
}

// counterTracks draws each series as a counter track under the run's
// track: resident pages as a count (a gauge: a bucket's last value), the
// rest as bytes per interval (a rate: a bucket's sum, falling back to
// zero in the bucket after its last).
func (b *builder) counterTracks(s *series) error {
	defer s.points.Close()
	if s.err != nil {
		return fmt.Errorf("counters: %w", s.err)
	}
	var tr *track
	cur, have := seriesPoint{}, false
	flush := func(next *seriesPoint) {
		if !have {
			return
		}
		b.emit(trackEvent{ts: cur.bucket * b.opt.Interval, track: tr.uuid, typ: typeCounter, counter: cur.v})
		if tr.counterUnit == unitBytes && (next == nil || next.series != cur.series || next.bucket != cur.bucket+1) {
			b.emit(trackEvent{ts: (cur.bucket + 1) * b.opt.Interval, track: tr.uuid, typ: typeCounter})
		}
	}
	err := s.points.Each(func(p *seriesPoint) error {
		if have && p.series == cur.series && p.bucket == cur.bucket {
			if tr.counterUnit == unitBytes {
				cur.v += p.v
			} else {
				cur.v = p.v
			}
			return nil
		}
		flush(p)
		if !have || p.series != cur.series {
			name := s.order[p.series]
			tr = b.childTrack(b.noteTrack(), name)
			tr.counterUnit = unitBytes
			if strings.HasPrefix(name, "resident") {
				tr.counterUnit, tr.unitName = unitCount, "pages"
			} else {
				tr.name += fmt.Sprintf(" per %d ms", b.opt.Interval/1_000_000)
			}
			b.sum.CounterTracks++
		}
		cur, have = *p, true
		return nil
	})
	flush(nil)
	if err != nil {
		return fmt.Errorf("counters: %w", err)
	}
	return nil
}

// noteTrack is the run's own track, parent of the counters.
func (b *builder) noteTrack() *track {
	for _, t := range b.tracks {
		if t.name == "iocorr" && t.parent == 0 && !t.thread && t.pid == 0 {
			return t
		}
	}
	t := &track{uuid: b.newUUID(), name: "iocorr"}
	b.tracks = append(b.tracks, t)
	return t
}

// blockSlices puts requests on lanes of their device's track: requests
// in flight at once overlap, and slices of one track must nest.
// lane is one child track of a parent whose slices may overlap: a slice
// goes on the first lane free at its start.
type lane struct {
	tr   *track
	free uint64
}

func (b *builder) lane(lanes *[]*lane, parent *track, name string, start, end uint64) *track {
	for _, l := range *lanes {
		if l.free <= start {
			l.free = max(end, start+1)
			return l.tr
		}
	}
	l := &lane{tr: b.childTrack(parent, fmt.Sprintf("%s %d", name, len(*lanes))), free: max(end, start+1)}
	*lanes = append(*lanes, l)
	return l.tr
}

func (b *builder) blockSlices(reqs *extsort.Sorter[request]) error {
	lanes := map[int][]*lane{}
	parents := map[int]*track{}
	return reqs.Each(func(r *request) error {
		p := parents[r.dev]
		if p == nil {
			name := "block I/O (other files)"
			if r.dev >= 0 {
				bd := b.meta.Models[r.dev].Block
				name = fmt.Sprintf("block I/O %s", kernel.DevString(bd.DiskDev))
			}
			p = &track{uuid: b.newUUID(), name: name}
			b.tracks = append(b.tracks, p)
			parents[r.dev] = p
		}
		ls := lanes[r.dev]
		tr := b.lane(&ls, p, "queue slot", r.issue, r.done)
		lanes[r.dev] = ls
		op := "read"
		if r.write {
			op = "write"
		}
		name, anns := fmt.Sprintf("%s %d KiB", op, r.bytes>>10), []annotation{annU("bytes", r.bytes), annU("latency_ns", r.done-r.issue)}
		if r.unseen {
			// Placed when BPF learned it was done: no latency to show.
			name += " (completion unseen)"
			anns[1] = annS("latency_ns", "NA: completion not seen by BPF")
		}
		b.slice(tr, r.issue, r.done, name, "block", anns, r.flows)
		b.sum.BlockRequests++
		return nil
	})
}

// rank orders events of one timestamp: ends first, so that a slice that
// ends where the next begins closes before it opens.
func rank(typ uint64) int {
	switch typ {
	case typeSliceEnd:
		return 0
	case typeCounter:
		return 1
	case typeInstant:
		return 2
	}
	return 3
}

func (b *builder) write(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	var buf []byte
	for i, t := range b.tracks {
		buf = appendPacket(buf[:0], t.marshal(i == 0))
		if _, err := bw.Write(buf); err != nil {
			return err
		}
		b.sum.TrackPackets++
	}
	if b.err != nil {
		return b.err
	}
	n := 0
	in := newInterner()
	err := b.events.Each(func(e *trackEvent) error {
		buf = appendPacket(buf[:0], e.marshal(in))
		n++
		_, err := bw.Write(buf)
		return err
	})
	if err != nil {
		return err
	}
	b.sum.Packets = b.sum.TrackPackets + n
	return bw.Flush()
}

// WriteFile writes the trace to path through a temporary file renamed
// into place, so that a failed export leaves no truncated trace.
func WriteFile(path string, recorded *store.Run, opt Options) (Summary, error) {
	var sum Summary
	err := atomicfile.Write(path, 0o644, false, func(w io.Writer) error {
		var err error
		sum, err = Export(w, recorded, opt)
		return err
	})
	return sum, err
}
