package correlate

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// Stats counts what the correlator met.
type Stats struct {
	Spool         ingest.SpoolStats  // set by AddSpool
	Decode        ingest.DecodeStats // set by AddSpool
	Events        uint64             // attributed events emitted
	Unattributed  uint64             // records of other types, kept only in counts
	PendingCapped uint64             // readahead windows cut short by the pending cap
	// HeldAggsPeak and HeldTokensPeak are the most aggregate rows, and
	// the most tokens with rows, the correlator held at once: with an
	// AggSink they stay near one token's rows whatever the run's length.
	HeldAggsPeak   uint64
	HeldTokensPeak uint64
	FaultsByMaps   uint64 // faults the kernel did not resolve, resolved by the mappings
	// FaultsCounted are the faults outside the model files that came as
	// the kernel's counts (EV_FAULT_COUNT), not one record each.
	FaultsCounted uint64
	MapsMissing   uint64 // maps snapshots named in the metadata but absent
}

// Result is what the store keeps of a run's attribution, and what the
// correlator met on the way.
type Result struct {
	event.Result
	Stats Stats
	// PicksUnseen are the MoE layers (those with expert tensors) whose
	// router picks no probe saw in a run whose tokens saw others': llama.cpp
	// computed them on another backend (a GPU's, as -ngl without
	// --cpu-moe for those layers leaves them), where no CPU graph reads
	// the router's output.
	PicksUnseen []uint16
	// PicksUnseenCalls are the calls in which layers not in PicksUnseen
	// had picks unseen (picksUnseenCalls): their counts are NA too, in
	// those calls' phase and tokens.
	PicksUnseenCalls []event.PicksUnseenCall
}

// AggSink receives aggregate rows the correlator no longer holds. Rows
// of one key may come more than once (a record stamped with a token whose
// rows were already handed over: a block request completing late); the
// sink sums them, so every row is counted once whenever it arrives. A sink
// that is also an AggSink keeps the run's aggregates, and Finish returns
// none (Result.Aggs empty, TokenInfo's touched counts left to the sink).
type AggSink interface {
	Agg(a *event.Agg) error
}

// heldTokens is how many tokens before the newest one seen keep their
// aggregate rows in memory when there is an AggSink: the previous token's
// block completions and held-back page adds still arrive while the next
// token starts. Later records are still exact (AggSink sums), only dearer.
const heldTokens = 1

// maxHeldAggs bounds the rows held whatever the tokens: a prefill of a
// long prompt is one token. Past it every row is handed over (~130 B a
// row held: ~17 MiB).
const maxHeldAggs = 1 << 17

// Correlator attributes records. It is not safe for concurrent use.
type Correlator struct {
	meta    *rundir.Meta
	sink    event.Sink
	marks   event.MarkSink // the sink, when it keeps the timeline too
	aggOut  AggSink        // the sink, when it keeps the aggregates too
	models  []*modelIndex
	tensors []event.Tensor
	byName  map[string]uint32
	ops     []string
	opIDs   map[string]uint32
	opBySeq []uint32 // op probe sequence number → op id
	vm      *vmTracker
	// offsetsInUserSpace: the kernel had no bpf_find_vma, so no fault was
	// resolved there and each is looked up in the mappings seen.
	offsetsInUserSpace bool

	// Aggregates live in a slab indexed by a map, not one allocation per
	// cell: a long MoE run has millions of cells. A *Counters from agg is
	// valid until the next call to agg.
	aggIdx  map[event.AggKey]int32
	aggs    []event.Counters
	spare   []event.Counters // the slab before the last hand-over, reused
	maxHeld int              // maxHeldAggs; tests lower it
	newest  uint32           // the newest token seen
	held    map[uint32]bool  // tokens with held rows, counted at each hand-over
	tokens  map[uint32]*event.TokenInfo
	lastTok *event.TokenInfo           // the token of the previous record: almost always the next one's too
	experts map[event.ExpertSel]uint64 // Count unused in the key
	selName map[selKey]string          // the node name whose ids were counted for a token's layer
	selRows map[selKey]int32           // rows of ids (tokens) counted for a token's layer
	graphed map[uint32]bool            // tokens in which a CPU graph was computed
	// bufOf is the backend buffer of each weight a probe saw (a graph
	// node's source, or a copy while loading) by tensor id; bufName names
	// buffers as ggml_backend_buffer_name returned, the latest for an
	// address (a freed buffer's address may come back).
	bufOf   map[uint32]uint64
	bufName map[uint64]string
	tids    map[uint32]*tidState
	// freeTids are emptied thread states kept for reuse: threads come
	// and go (compute threads per graph in some builds), and a state
	// whose window was flushed holds nothing but its buffers.
	freeTids []*tidState

	slices []slice
	ev     event.Event
	req    uint32 // the last raw record's request id (Event.Req)

	threads map[uint32]bool // tids given a MarkThread
	lastTid uint32          // the tid of the previous record's MarkThread check
	lastTs  uint64          // the latest record's time
	mark    event.Mark
	stats   Stats
	err     error
}

// New returns a correlator for the run described by meta, emitting to sink.
// Call LoadMaps to let it resolve faults the kernel could not.
func New(meta *rundir.Meta, sink event.Sink) (*Correlator, error) {
	c := &Correlator{
		meta:               meta,
		sink:               sink,
		byName:             make(map[string]uint32),
		ops:                []string{""},
		opIDs:              map[string]uint32{"": 0},
		vm:                 newVMTracker(),
		offsetsInUserSpace: meta.FaultOffsetsInUserSpace(),
		aggIdx:             make(map[event.AggKey]int32),
		maxHeld:            maxHeldAggs,
		tokens:             make(map[uint32]*event.TokenInfo),
		experts:            make(map[event.ExpertSel]uint64),
		selName:            make(map[selKey]string),
		selRows:            make(map[selKey]int32),
		graphed:            make(map[uint32]bool),
		bufOf:              make(map[uint32]uint64),
		bufName:            make(map[uint64]string),
		tids:               make(map[uint32]*tidState),
		threads:            make(map[uint32]bool),
	}
	c.SetSink(sink)
	for i, n := range event.PseudoNames {
		c.tensors = append(c.tensors, event.Tensor{ID: uint32(i), Name: n, Model: -1, Layer: -1, Role: n})
	}
	for mi := range meta.Models {
		m := &meta.Models[mi]
		idx, err := newModelIndex(m, uint32(len(c.tensors)))
		if err != nil {
			return nil, err
		}
		c.models = append(c.models, idx)
		for _, t := range m.Tensors {
			id := uint32(len(c.tensors))
			c.tensors = append(c.tensors, event.Tensor{
				ID: id, Name: t.Name, Model: mi, Layer: t.Layer, Role: t.Role, Type: t.Type,
				Offset: t.Offset, Size: t.Size, Experts: t.Experts, ExpertStride: t.ExpertStride,
			})
			if _, dup := c.byName[t.Name]; !dup {
				c.byName[t.Name] = id
			}
		}
	}
	return c, nil
}

// NewRun is New for run directory dir: it reads the metadata and the maps
// snapshots. Feed it with AddSpool, then call Finish.
func NewRun(dir string, sink event.Sink) (*Correlator, error) {
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		return nil, err
	}
	c, err := New(meta, sink)
	if err != nil {
		return nil, fmt.Errorf("run metadata: %w", err)
	}
	if err := c.LoadMaps(dir); err != nil {
		return nil, err
	}
	return c, nil
}

// SetSink sets where attributed events go; New may be given a nil sink
// when the sink needs the tensor dictionary to be built. A sink that is
// also an event.MarkSink receives the run's timeline marks.
func (c *Correlator) SetSink(s event.Sink) {
	c.sink = s
	c.marks, _ = s.(event.MarkSink)
	c.aggOut, _ = s.(AggSink)
}

// Meta is the run metadata the correlator works from.
func (c *Correlator) Meta() *rundir.Meta { return c.meta }

// AddSpool decodes and attributes every record of the spool at path. It
// checks ctx every 64 Ki records.
func (c *Correlator) AddSpool(ctx context.Context, path string) error {
	sp, err := ingest.OpenSpool(path)
	if err != nil {
		return err
	}
	defer sp.Close()
	ds := &c.stats.Decode
	for n := 0; ; n++ {
		if n&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		rec, err := sp.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		r, ok := ingest.Decode(rec, ds)
		if !ok {
			continue
		}
		if err := c.Add(r); err != nil {
			return err
		}
	}
	c.stats.Spool = sp.Stats()
	return nil
}

func (c *Correlator) opID(name string) uint32 {
	if id, ok := c.opIDs[name]; ok {
		return id
	}
	id := uint32(len(c.ops))
	c.ops = append(c.ops, name)
	c.opIDs[name] = id
	return id
}

func (c *Correlator) opName(op uint32) string {
	if int(op) < len(c.meta.OpNames) && c.meta.OpNames[op] != "" {
		return c.meta.OpNames[op]
	}
	return "op" + strconv.Itoa(int(op))
}

func (c *Correlator) modelOf(dev uint32, ino uint64) *modelIndex {
	for _, m := range c.models {
		if m.ino == ino && m.dev == dev {
			return m
		}
	}
	return nil
}

func (c *Correlator) agg(token, tensor uint32, expert int16, op uint32) *event.Counters {
	k := event.AggKey{Token: token, Tensor: tensor, Expert: expert, Op: op}
	i, ok := c.aggIdx[k]
	if !ok {
		if len(c.aggs) >= c.maxHeld && c.aggOut != nil {
			c.handOver(0, true)
		}
		i = int32(len(c.aggs))
		c.aggs = append(c.aggs, event.Counters{})
		c.aggIdx[k] = i
	}
	return &c.aggs[i]
}

func (c *Correlator) token(hdr *wire.EventHdr) *event.TokenInfo {
	t := c.lastTok
	if t == nil || t.Token != hdr.Token {
		t = c.tokens[hdr.Token]
		if t == nil {
			t = &event.TokenInfo{Token: hdr.Token, Phase: hdr.Phase}
			c.tokens[hdr.Token] = t
		}
		c.lastTok = t
	}
	if t.Phase == event.PhaseNone {
		t.Phase = hdr.Phase
	}
	return t
}

func (c *Correlator) probeOp(hdr *wire.EventHdr) uint32 {
	if s := hdr.Op; s != 0 && int(s) < len(c.opBySeq) {
		return c.opBySeq[s]
	}
	return 0
}

// newReq numbers the next raw record that yields events.
func (c *Correlator) newReq() uint32 {
	c.req++
	return c.req
}

func (c *Correlator) emit(ev *event.Event) {
	if c.err != nil {
		return
	}
	c.stats.Events++
	if c.sink == nil {
		return
	}
	if err := c.sink.Event(ev); err != nil {
		c.err = err
	}
}

// Add attributes one decoded record. An error is the sink's; it is sticky.
func (c *Correlator) Add(r ingest.Record) error {
	if c.err != nil {
		return c.err
	}
	hdr := r.Hdr
	if hdr.Token > c.newest {
		c.newest = hdr.Token
		if c.aggOut != nil && hdr.Token > heldTokens {
			c.handOver(hdr.Token-heldTokens, false)
		}
	}
	c.timeline(r)
	if c.meta.Layout != nil && c.meta.Layout.Invalid != "" && readsLayout(r.Type) {
		// Read with a ggml struct layout that failed validation: not data.
		c.stats.Unattributed++
		return c.err
	}
	switch r.Type {
	case uint16(wire.EventTypeEV_PAGE_ADD):
		c.pageAdd(r.Page())
		return c.err
	case uint16(wire.EventTypeEV_PAGE_DEL):
		c.pageDel(r.Page())
		return c.err
	case uint16(wire.EventTypeEV_PAGE_RUN):
		c.pageRun(r.PageRun())
		return c.err
	case uint16(wire.EventTypeEV_BLOCK):
		// A completion may run in any task's context, the faulting
		// thread's included: it must not end that thread's window.
		c.block(r.Block())
		return c.err
	case uint16(wire.EventTypeEV_FAULT_COUNT):
		// Written at the run's end, after every record of its thread:
		// it must not end the thread's readahead window either.
		c.faultCount(r.FaultCount())
		return c.err
	case uint16(wire.EventTypeEV_FILEMAP_FAULT), uint16(wire.EventTypeEV_READAHEAD):
		// Part of a fault in progress: they must not end the thread's
		// readahead window.
		c.stats.Unattributed++
		return nil
	}
	// Any other record of a thread ends its window of held-back adds.
	var f *wire.FaultEvent
	if r.Type == uint16(wire.EventTypeEV_FAULT) {
		f = r.Fault()
	}
	c.flushTid(hdr.Tid, f)
	switch r.Type {
	case uint16(wire.EventTypeEV_FAULT):
		c.fault(f)
	case uint16(wire.EventTypeEV_DECODE_BEGIN):
		d := r.Decode()
		t := c.token(hdr)
		t.NTokens = d.N_tokens
		t.Seqs, t.SeqState, t.SeqTokens = d.Seqs, d.SeqState, d.SeqTokens
		t.StartNS = d.BeginTs
		if t.StartNS == 0 {
			t.StartNS = hdr.Ts
		}
		if t.Phase == event.PhaseNone {
			t.Phase = event.PhaseOfBatch(d.N_tokens)
		}
	case uint16(wire.EventTypeEV_GRAPH):
		c.graphed[hdr.Token] = true
	case uint16(wire.EventTypeEV_DECODE_END):
		d := r.Decode()
		t := c.token(hdr)
		t.EndNS = hdr.Ts
		if t.StartNS == 0 {
			t.StartNS = d.BeginTs
		}
		if t.NTokens == 0 {
			t.NTokens = d.N_tokens
		}
	case uint16(wire.EventTypeEV_NODE):
		c.node(r.Node())
	case uint16(wire.EventTypeEV_OP):
		o := r.Op()
		seq := hdr.Op
		if seq != 0 && seq < 1<<26 { // a sequence number, not garbage: bound the table
			for int(seq) >= len(c.opBySeq) {
				c.opBySeq = append(c.opBySeq, 0)
			}
			c.opBySeq[seq] = c.opID(c.opName(o.Op))
		}
	case uint16(wire.EventTypeEV_EXPERTS):
		c.expertsSel(r.Experts())
	case uint16(wire.EventTypeEV_PLACE):
		c.place(r.Place())
	case uint16(wire.EventTypeEV_BUFNAME):
		b := r.BufName()
		// An empty name is the recorder's word, at the run's end, that
		// the name of a buffer the kernel could not read could not be
		// found in a file either: it never hides a name read before.
		if name := wire.CString(b.Name[:]); name != "" {
			c.bufName[b.Buffer] = name
		} else if c.bufName[b.Buffer] == "" {
			c.bufName[b.Buffer] = event.DeviceUnnamed
		}
	case uint16(wire.EventTypeEV_READ):
		c.read(r.Read())
	case uint16(wire.EventTypeEV_MMAP):
		c.vm.mmap(r.Mmap())
		c.stats.Unattributed++
	case uint16(wire.EventTypeEV_MUNMAP):
		c.vm.munmap(r.Munmap())
		c.stats.Unattributed++
	default:
		c.stats.Unattributed++
	}
	return c.err
}

// handOver gives the AggSink the rows of tokens before token (all of
// them when all) and keeps the rest in a compacted slab.
func (c *Correlator) handOver(before uint32, all bool) {
	if c.err != nil || len(c.aggs) == 0 {
		return
	}
	c.stats.HeldAggsPeak = max(c.stats.HeldAggsPeak, uint64(len(c.aggs)))
	clear(c.held)
	if c.held == nil {
		c.held = map[uint32]bool{}
	}
	var a event.Agg
	for k, i := range c.aggIdx {
		c.held[k.Token] = true
		if !all && k.Token >= before {
			continue
		}
		a = event.Agg{AggKey: k, Counters: c.aggs[i]}
		delete(c.aggIdx, k)
		if err := c.aggOut.Agg(&a); err != nil && c.err == nil {
			c.err = err
		}
	}
	c.stats.HeldTokensPeak = max(c.stats.HeldTokensPeak, uint64(len(c.held)))
	kept := c.spare[:0]
	for k, i := range c.aggIdx {
		c.aggIdx[k] = int32(len(kept))
		kept = append(kept, c.aggs[i])
	}
	c.spare, c.aggs = c.aggs[:0], kept
}

// Finish flushes held-back events and returns the aggregates.
func (c *Correlator) Finish() (*Result, error) {
	tids := make([]uint32, 0, len(c.tids))
	for tid := range c.tids {
		tids = append(tids, tid)
	}
	sort.Slice(tids, func(i, j int) bool { return tids[i] < tids[j] })
	for _, tid := range tids {
		c.flushTid(tid, nil)
	}
	if c.marks != nil {
		c.emitMark(&event.Mark{Ts: c.lastTs, Kind: event.MarkEnd})
	}
	if c.aggOut != nil {
		c.handOver(0, true)
	}
	c.stats.HeldAggsPeak = max(c.stats.HeldAggsPeak, uint64(len(c.aggs)))
	if c.err != nil {
		return nil, c.err
	}
	r := &Result{Result: event.Result{Tensors: c.tensors, Ops: c.ops, OpProbes: len(c.opBySeq) > 0}, Stats: c.stats}
	type touch struct {
		tensor uint32
		expert int16
	}
	touchedT := map[uint32]map[uint32]bool{}
	touchedE := map[uint32]map[touch]bool{}
	r.Aggs = make([]event.Agg, 0, len(c.aggs))
	for k, i := range c.aggIdx {
		r.Aggs = append(r.Aggs, event.Agg{AggKey: k, Counters: c.aggs[i]})
		if k.Tensor < event.FirstTensor {
			continue
		}
		if touchedT[k.Token] == nil {
			touchedT[k.Token] = map[uint32]bool{}
			touchedE[k.Token] = map[touch]bool{}
		}
		touchedT[k.Token][k.Tensor] = true
		if k.Expert >= 0 {
			touchedE[k.Token][touch{k.Tensor, k.Expert}] = true
		}
	}
	sort.Slice(r.Aggs, func(i, j int) bool {
		a, b := r.Aggs[i].AggKey, r.Aggs[j].AggKey
		if a.Token != b.Token {
			return a.Token < b.Token
		}
		if a.Tensor != b.Tensor {
			return a.Tensor < b.Tensor
		}
		if a.Expert != b.Expert {
			return a.Expert < b.Expert
		}
		return a.Op < b.Op
	})
	for _, t := range c.tokens {
		t.TensorsTouched = uint32(len(touchedT[t.Token]))
		t.ExpertsTouched = uint32(len(touchedE[t.Token]))
		r.Tokens = append(r.Tokens, *t)
	}
	sort.Slice(r.Tokens, func(i, j int) bool { return r.Tokens[i].Token < r.Tokens[j].Token })
	for k, n := range c.experts {
		k.Count = n
		r.Experts = append(r.Experts, k)
	}
	sort.Slice(r.Experts, func(i, j int) bool {
		a, b := r.Experts[i], r.Experts[j]
		if a.Token != b.Token {
			return a.Token < b.Token
		}
		if a.Layer != b.Layer {
			return a.Layer < b.Layer
		}
		return a.Expert < b.Expert
	})
	for _, t := range c.tensors {
		if t.NotFileBacked {
			r.NotBacked = append(r.NotBacked, t.Name)
		}
	}
	// A buffer named only after its weights were seen.
	for id, b := range c.bufOf {
		if c.tensors[id].Device == "" {
			c.tensors[id].Device = c.bufName[b]
		}
	}
	decoded := slices.ContainsFunc(r.Tokens, func(t event.TokenInfo) bool { return t.StartNS != 0 })
	r.PicksUnseen = picksUnseen(c.tensors, r.Experts, decoded)
	r.PicksUnseenCalls = picksUnseenCalls(c.tensors, r.Tokens, c.selRows, c.graphed, r.PicksUnseen)
	return r, nil
}

// String summarises a Result for logs.
func (r *Result) String() string {
	return fmt.Sprintf("%d tokens, %d tensors, %d aggregate rows, %d events", len(r.Tokens), len(r.Tensors), len(r.Aggs), r.Stats.Events)
}

// Tensors is the tensor dictionary: pseudo tensors, then every model's
// tensors in metadata order. Ops of graph nodes fill in as EV_NODE arrive.
func (c *Correlator) Tensors() []event.Tensor { return c.tensors }
