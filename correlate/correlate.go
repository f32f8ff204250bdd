package correlate

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/kernel"
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

// maxPending bounds the adds held back per thread while waiting for the
// fault that may have triggered them; a readahead window is at most a few
// MiB, far fewer folios than this.
const maxPending = 8192

type tidState struct {
	pending []event.Event
	// since is, per pending add, when its first page was added: a run's
	// Event.Ts is its last folio's, and the whole run must lie in the
	// fault's window to have been read ahead by it.
	since []uint64
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

// maxFreeTids bounds the per-thread states kept for reuse.
const maxFreeTids = 16

// selKey is one router decision site: a token's MoE layer.
type selKey struct {
	token uint32
	layer uint16
}

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
	default:
		c.stats.Unattributed++
	}
	return c.err
}

// timeline passes the record on as timeline marks, if it is one. Every
// record is seen, whatever the layout check decides of it: the trace draws
// ops and graphs as recorded.
func (c *Correlator) timeline(r ingest.Record) {
	hdr := r.Hdr
	c.lastTs = max(c.lastTs, hdr.Ts)
	if c.marks == nil || r.Type == uint16(wire.EventTypeEV_FAULT_COUNT) {
		// A count comes at the run's end, stamped with its last fault:
		// no instant of the timeline, nor a thread's first sign.
		return
	}
	m := &c.mark
	if r.Type == uint16(wire.EventTypeEV_SCHED) {
		// A scheduler record's header is whoever ran the probe: only its
		// threads are facts.
		s := r.Sched()
		*m = event.Mark{Ts: hdr.Ts, Tid: s.PrevTid, Tgid: s.PrevTgid}
		switch s.Kind {
		case uint32(wire.SchedKindSCHEDEV_SWITCH):
			m.Kind, m.PrevState, m.NextTid, m.NextTgid = event.MarkSwitch, s.PrevState, s.NextTid, s.NextTgid
		case uint32(wire.SchedKindSCHEDEV_WAKEUP):
			m.Kind = event.MarkWakeup
		default:
			return
		}
		c.emitMark(m)
		return
	}
	if hdr.Tgid != 0 && hdr.Tid != 0 && hdr.Tid != c.lastTid {
		if !c.threads[hdr.Tid] {
			c.threads[hdr.Tid] = true
			*m = event.Mark{Ts: hdr.Ts, Kind: event.MarkThread, Tid: hdr.Tid, Tgid: hdr.Tgid}
			c.emitMark(m)
		}
		c.lastTid = hdr.Tid
	}
	switch r.Type {
	case uint16(wire.EventTypeEV_TASK), uint16(wire.EventTypeEV_DECODE_BEGIN), uint16(wire.EventTypeEV_DECODE_END),
		uint16(wire.EventTypeEV_GRAPH), uint16(wire.EventTypeEV_OP), uint16(wire.EventTypeEV_GRAPH_END):
	default:
		return // I/O, attributed as events
	}
	*m = event.Mark{Ts: hdr.Ts, Tid: hdr.Tid, Tgid: hdr.Tgid, Token: hdr.Token, Phase: hdr.Phase}
	switch r.Type {
	case uint16(wire.EventTypeEV_TASK):
		t := r.Task()
		if t.Kind != uint32(wire.TaskKindTASKEV_EXEC) {
			return
		}
		m.Kind, m.Name = event.MarkExec, wire.CString(t.Comm[:])
	case uint16(wire.EventTypeEV_DECODE_BEGIN), uint16(wire.EventTypeEV_DECODE_END):
		d := r.Decode()
		m.Kind, m.Begin, m.NTokens, m.Ret = event.MarkDecodeEnd, d.BeginTs, d.N_tokens, d.Ret
		if r.Type == uint16(wire.EventTypeEV_DECODE_BEGIN) {
			m.Kind = event.MarkDecodeBegin
		}
	case uint16(wire.EventTypeEV_GRAPH):
		g := r.Graph()
		m.Kind, m.Seq, m.Nodes, m.WeightNodes = event.MarkGraph, g.Seq, g.N_nodes, g.N_weightNodes
	case uint16(wire.EventTypeEV_OP):
		o := r.Op()
		m.Kind, m.Op, m.Name = event.MarkOp, o.Op, wire.CString(o.Name[:])
	case uint16(wire.EventTypeEV_GRAPH_END):
		g := r.GraphEnd()
		m.Kind, m.Begin, m.Seq = event.MarkGraphEnd, g.BeginTs, g.Seq
	}
	c.emitMark(m)
}

func (c *Correlator) emitMark(m *event.Mark) {
	if c.err != nil {
		return
	}
	if err := c.marks.Mark(m); err != nil {
		c.err = err
	}
}

// readsLayout says whether records of type typ were read from ggml
// structs with the layout (graph nodes, ops, expert picks).
func readsLayout(typ uint16) bool {
	switch typ {
	case uint16(wire.EventTypeEV_NODE), uint16(wire.EventTypeEV_OP), uint16(wire.EventTypeEV_EXPERTS), uint16(wire.EventTypeEV_PLACE):
		return true
	}
	return false
}

// faultSlice is the tensor slice of a fault's address. The kernel's
// resolution is used when it made one; a fault it did not try to resolve
// (start_ts 0: taken in kernel mode on a user address, no page_fault_user;
// or any fault of a kernel without bpf_find_vma) is looked up in the
// process's mappings. A fault the kernel resolved to
// no file is anonymous: the mappings are not consulted, as a file mapped
// there earlier may have been unmapped since.
func (c *Correlator) faultSlice(f *wire.FaultEvent, count bool) slice {
	dev, ino, off := f.Dev, f.Ino, f.FileOff
	if ino == 0 && (f.StartTs == 0 || c.offsetsInUserSpace) {
		if m := c.vm.resolve(f.Hdr.Tgid, f.Addr, f.Hdr.Ts); m != nil && m.ino != 0 {
			dev, ino, off = m.dev, m.ino, m.off+(f.Addr-m.start)
			if count {
				c.stats.FaultsByMaps++
			}
		}
	}
	if ino == 0 {
		return slice{tensor: event.TensorAnon, expert: -1, off: int64(f.Addr), file: int64(f.Addr), n: kernel.PageSize}
	}
	m := c.modelOf(dev, ino)
	if m == nil {
		return slice{tensor: event.TensorOther, expert: -1, off: int64(off), file: int64(off), n: kernel.PageSize}
	}
	return m.lookup(int64(off))
}

func (c *Correlator) fault(f *wire.FaultEvent) {
	hdr := &f.Hdr
	ev := &c.ev
	*ev = event.Event{Ts: hdr.Ts, Req: c.newReq(), Token: hdr.Token, Phase: hdr.Phase, Op: c.probeOp(hdr), Tid: hdr.Tid,
		Trigger: event.NoTensor, Expert: -1, Kind: event.KindFault, Class: f.Class, Bytes: kernel.PageSize}
	s := c.faultSlice(f, true)
	ev.Tensor, ev.Expert, ev.Offset = s.tensor, s.expert, s.off
	if f.StartTs != 0 && f.StartTs <= hdr.Ts && isCompleted(f.Class) {
		ev.Dur = hdr.Ts - f.StartTs
	}
	c.chargeFaults(hdr, ev.Tensor, ev.Expert, ev.Op, f.Class, 1, ev.Dur)
	c.emit(ev)
}

// isCompleted says whether a fault of class was completed, as the kernel
// counts faults. An unaccounted one's "completion" is when the thread's
// next fault began: no stall can be told, and it is no fault the kernel
// counted. (A class this iocorr does not know is no counted fault either.)
func isCompleted(class uint8) bool {
	return class == uint8(wire.FaultClassFAULT_MINOR) || class == uint8(wire.FaultClassFAULT_MAJOR)
}

// chargeFaults charges n faults of class with their summed stall to the
// aggregate row (token of hdr, tensor, expert, op) and to the token: the
// one charge of a fault record and of the kernel's count alike.
func (c *Correlator) chargeFaults(hdr *wire.EventHdr, tensor uint32, expert int16, op uint32, class uint8, n, stall uint64) {
	a := c.agg(hdr.Token, tensor, expert, op)
	t := c.token(hdr)
	if !isCompleted(class) {
		a.Unaccounted += n
		t.Unaccounted += n
		return
	}
	for _, k := range [2]*event.Counters{a, &t.Counters} {
		k.Faults += n
		if class == uint8(wire.FaultClassFAULT_MAJOR) {
			k.Major += n
		} else {
			k.Minor += n
		}
		k.StallNS += stall
	}
}

// faultCount charges the kernel's count of faults outside the model files
// as their records would have been charged, one by one: to the
// [anonymous] or [other file] pseudo tensor, per token and op.
func (c *Correlator) faultCount(fc *wire.FaultCountEvent) {
	var tensor uint32
	switch fc.Where {
	case uint8(wire.FaultWhereFAULT_WHERE_ANON):
		tensor = event.TensorAnon
	case uint8(wire.FaultWhereFAULT_WHERE_OTHER):
		tensor = event.TensorOther
	default:
		// A model's faults are never counted: a count that says so is
		// no count this iocorr knows.
		c.stats.Unattributed++
		return
	}
	c.stats.FaultsCounted += fc.Count
	c.chargeFaults(&fc.Hdr, tensor, -1, c.probeOp(&fc.Hdr), fc.Class, fc.Count, fc.StallNs)
}

// flushTid emits the adds held back for tid; those inside fault f's
// window are charged to f's tensor as trigger.
func (c *Correlator) flushTid(tid uint32, f *wire.FaultEvent) {
	st := c.tids[tid]
	if st == nil || len(st.pending) == 0 {
		return
	}
	trig, texp := event.NoTensor, int16(-1)
	var tok, op uint32
	if f != nil && f.StartTs != 0 {
		s := c.faultSlice(f, false)
		trig, texp = s.tensor, s.expert
		tok, op = f.Hdr.Token, c.probeOp(&f.Hdr)
	}
	var trigBytes uint64
	for i := range st.pending {
		ev := &st.pending[i]
		if trig != event.NoTensor && st.since[i] >= f.StartTs && ev.Ts <= f.Hdr.Ts {
			ev.Trigger = trig
			trigBytes += ev.Bytes
		}
		c.emit(ev)
	}
	st.pending = st.pending[:0]
	st.since = st.since[:0]
	delete(c.tids, tid)
	if len(c.freeTids) < maxFreeTids {
		c.freeTids = append(c.freeTids, st)
	}
	if trigBytes > 0 {
		c.agg(tok, trig, texp, op).TriggerBytes += trigBytes
		c.token(&f.Hdr).TriggerBytes += trigBytes
	}
}

func (c *Correlator) pageAdd(p *wire.PageEvent) {
	n := int64(1) << min(p.Order, 20)
	c.added(&p.Hdr, c.newReq(), p.Hdr.Ts, p.Dev, p.Ino, int64(p.Index)*kernel.PageSize, n*kernel.PageSize)
}

func (c *Correlator) pageDel(p *wire.PageEvent) {
	n := int64(1) << min(p.Order, 20)
	c.deleted(&p.Hdr, c.newReq(), p.Dev, p.Ino, int64(p.Index)*kernel.PageSize, n*kernel.PageSize)
}

// pageRun charges a run of folios as the per-folio records would have
// been charged: every byte range and page once, at the run's stamp.
func (c *Correlator) pageRun(p *wire.PageRunEvent) {
	var charge func(first, n uint64)
	req := c.newReq() // every range of the run is a slice of this one record
	switch p.Kind {
	case uint16(wire.EventTypeEV_PAGE_ADD):
		since := p.FirstTs
		if since == 0 || since > p.Hdr.Ts {
			since = p.Hdr.Ts
		}
		charge = func(first, n uint64) {
			c.added(&p.Hdr, req, since, p.Dev, p.Ino, int64(first)*kernel.PageSize, int64(n)*kernel.PageSize)
		}
	case uint16(wire.EventTypeEV_PAGE_DEL):
		charge = func(first, n uint64) {
			c.deleted(&p.Hdr, req, p.Dev, p.Ino, int64(first)*kernel.PageSize, int64(n)*kernel.PageSize)
		}
	default:
		c.stats.Unattributed++
		return
	}
	if p.Index >= 1<<40 || !p.Ranges(charge) {
		c.stats.Unattributed++
	}
}

// tidState is tid's state, taken from the reused ones when it has none.
func (c *Correlator) tidState(tid uint32) *tidState {
	st := c.tids[tid]
	if st == nil {
		if n := len(c.freeTids); n > 0 {
			st, c.freeTids = c.freeTids[n-1], c.freeTids[:n-1]
		} else {
			st = &tidState{}
		}
		c.tids[tid] = st
	}
	return st
}

// added holds back the adds of file range [off, off+n) until the thread's
// fault, if any, tells their trigger; first is when the first page of it
// was added, hdr.Ts when the last was.
func (c *Correlator) added(hdr *wire.EventHdr, req uint32, first uint64, dev uint32, ino uint64, off, n int64) {
	m := c.modelOf(dev, ino)
	t := c.token(hdr)
	op := c.probeOp(hdr)
	st := c.tidState(hdr.Tid)
	c.slices = c.fileSlices(c.slices[:0], m, off, n)
	for i := range c.slices {
		s := &c.slices[i]
		if len(st.pending) >= maxPending {
			c.stats.PendingCapped++
			c.flushTid(hdr.Tid, nil)
			st = c.tidState(hdr.Tid) // the flush let the state go
		}
		st.pending = append(st.pending, event.Event{Ts: hdr.Ts, Req: req, Offset: s.off, Bytes: uint64(s.n), Tensor: s.tensor,
			Token: hdr.Token, Op: op, Tid: hdr.Tid, Trigger: event.NoTensor, Expert: s.expert, Kind: event.KindPageAdd, Phase: hdr.Phase})
		st.since = append(st.since, first)
		a := c.agg(hdr.Token, s.tensor, s.expert, op)
		a.AddedBytes += uint64(s.n)
		a.PagesAdded += s.pagesFrom()
	}
	t.AddedBytes += uint64(n)
	t.PagesAdded += uint64(n / kernel.PageSize)
}

func (c *Correlator) deleted(hdr *wire.EventHdr, req uint32, dev uint32, ino uint64, off, n int64) {
	m := c.modelOf(dev, ino)
	t := c.token(hdr)
	op := c.probeOp(hdr)
	c.slices = c.fileSlices(c.slices[:0], m, off, n)
	for i := range c.slices {
		s := &c.slices[i]
		c.ev = event.Event{Ts: hdr.Ts, Req: req, Offset: s.off, Bytes: uint64(s.n), Tensor: s.tensor, Token: hdr.Token, Op: op,
			Tid: hdr.Tid, Trigger: event.NoTensor, Expert: s.expert, Kind: event.KindPageDel, Phase: hdr.Phase}
		a := c.agg(hdr.Token, s.tensor, s.expert, op)
		a.EvictedBytes += uint64(s.n)
		a.PagesEvicted += s.pagesFrom()
		c.emit(&c.ev)
	}
	t.EvictedBytes += uint64(n)
	t.PagesEvicted += uint64(n / kernel.PageSize)
}

// fileSlices is m's tensor slices of a file range, or one "[other file]"
// slice when the file is not a model.
func (c *Correlator) fileSlices(dst []slice, m *modelIndex, off, n int64) []slice {
	if m == nil {
		return append(dst, slice{tensor: event.TensorOther, expert: -1, off: off, file: off, n: n})
	}
	return m.appendSlices(dst, off, n)
}

// blockWrite is the class of block events that are not reads.
const blockWrite = 1

func (c *Correlator) block(b *wire.BlockEvent) {
	hdr := &b.Hdr
	class := uint8(0)
	if kernel.BlockOpOf(b.CmdFlags) != kernel.BlockRead { // writes, flushes, discards...
		class = blockWrite
	}
	base := event.Event{Ts: hdr.Ts, Req: c.newReq(), Token: hdr.Token, Op: c.probeOp(hdr), Tid: hdr.Tid, Trigger: event.NoTensor,
		Expert: -1, Kind: event.KindBlock, Phase: hdr.Phase, Class: class}
	if b.CompletionUnseen() {
		// Recorded when BPF learned the request was done (its reissue,
		// or the run's end): the time between is no latency.
		base.Class |= event.ClassCompletionUnseen
	} else if b.IssueTs != 0 && b.IssueTs <= hdr.Ts {
		base.Dur = hdr.Ts - b.IssueTs
	}
	t := c.token(hdr)
	if class == 0 {
		t.ReadBytes += uint64(b.Bytes)
		t.BlockReqs++
	}
	c.slices = c.slices[:0]
	disk, n := b.Sector*512, uint64(b.Bytes)
	var inside uint64
	// The slice holding the request's first byte: in no model's extent,
	// the "[other file]" slice appended last.
	start := -1
	for _, m := range c.models {
		if !m.onDisk(b.Dev) {
			continue
		}
		before := len(c.slices)
		var k uint64
		var first bool
		c.slices, k, first = m.appendDiskSlices(c.slices, disk, n)
		inside += k
		if first && len(c.slices) > before {
			start = before
		}
	}
	// A request of no bytes is kept too, as one of the "[other file]", so
	// that the tensors' requests add up to the token's.
	if inside < n || len(c.slices) == 0 {
		c.slices = append(c.slices, slice{tensor: event.TensorOther, expert: -1, off: int64(disk), file: int64(disk), n: int64(n - inside)})
	}
	if start < 0 {
		start = len(c.slices) - 1
	}
	for i := range c.slices {
		s := &c.slices[i]
		ev := base
		ev.Tensor, ev.Expert, ev.Offset, ev.Bytes = s.tensor, s.expert, s.off, uint64(s.n)
		if class == 0 {
			a := c.agg(ev.Token, s.tensor, s.expert, ev.Op)
			a.ReadBytes += uint64(s.n)
			// A request counts where its first byte lies, as a page
			// added does, so that any grouping of the aggregates (by
			// token, layer, expert...) sums to the requests it holds:
			// counted once per (tensor, expert) touched, a token's
			// requests summed 11 213 where the disk served 6 662.
			if i == start {
				a.BlockReqs++
			}
		}
		c.ev = ev
		c.emit(&c.ev)
	}
}

// read charges the bytes a read call returned to the tensors and expert
// slices of the file range it read (the kernel recorded only model files).
func (c *Correlator) read(rd *wire.ReadEvent) {
	hdr := &rd.Hdr
	base := event.Event{Ts: hdr.Ts, Req: c.newReq(), Token: hdr.Token, Op: c.probeOp(hdr), Tid: hdr.Tid, Trigger: event.NoTensor,
		Expert: -1, Kind: event.KindRead, Phase: hdr.Phase, Class: uint8(rd.Kind)}
	if rd.StartTs != 0 && rd.StartTs <= hdr.Ts {
		base.Dur = hdr.Ts - rd.StartTs
	}
	c.token(hdr).RequestedBytes += rd.Bytes
	c.slices = c.fileSlices(c.slices[:0], c.modelOf(rd.Dev, rd.Ino), int64(rd.Offset), int64(rd.Bytes))
	for i := range c.slices {
		s := &c.slices[i]
		ev := base
		ev.Tensor, ev.Expert, ev.Offset, ev.Bytes = s.tensor, s.expert, s.off, uint64(s.n)
		c.agg(ev.Token, s.tensor, s.expert, ev.Op).RequestedBytes += uint64(s.n)
		c.ev = ev
		c.emit(&c.ev)
	}
}

func (c *Correlator) node(n *wire.NodeEvent) {
	name := wire.CString(n.WeightName[:])
	id, ok := c.byName[name]
	if !ok {
		return // not a weight: inp_tokens, cache_k_l0, ...
	}
	if c.meta.Layout.Left(wire.CString(n.NodeName[:]), name) {
		return // failed validation (rundir.Meta.NodesNA): not to be read
	}
	t := &c.tensors[id]
	if t.Op == 0 {
		t.Op = c.opID(c.opName(n.Op))
	}
	// A weight is file-backed only in a model's own mapping: a driver's
	// host-visible buffer is a mapping of its device file or a memfd.
	if n.Ino == 0 || c.modelOf(n.Dev, n.Ino) == nil {
		t.NotFileBacked = true
	}
	c.placeIn(id, n.WeightBuffer)
}

// place is a weight the loader copied from the model's mapping into a
// backend's buffer.
func (c *Correlator) place(p *wire.PlaceEvent) {
	id, ok := c.byName[wire.CString(p.Name[:])]
	if !ok {
		return
	}
	c.tensors[id].Copied = true
	c.placeIn(id, p.Buffer)
}

// placeIn names the device of tensor id from buffer, by the buffer's
// name known now (a buffer is named while the model loads, before its
// weights are copied or read): the weight's first buffer stands.
func (c *Correlator) placeIn(id uint32, buffer uint64) {
	if buffer == 0 || c.tensors[id].Device != "" {
		return
	}
	if c.bufOf[id] == 0 {
		c.bufOf[id] = buffer
	}
	c.tensors[id].Device = c.bufName[buffer]
}

func (c *Correlator) expertsSel(e *wire.ExpertsEvent) {
	name := wire.CString(e.Name[:])
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return
	}
	layer, err := strconv.Atoi(name[i+1:])
	if err != nil || layer < 0 || layer > 0xffff {
		return
	}
	// The ids of a layer may be read at more than one node (the top-k and
	// the weights gather); count them from the first node name seen for
	// the token's layer only, so each router decision counts once.
	k := selKey{e.Hdr.Token, uint16(layer)}
	prefix := name[:i]
	if seen, ok := c.selName[k]; !ok {
		c.selName[k] = prefix
	} else if seen != prefix {
		return
	}
	cnt := min(int(e.Count), len(e.Ids))
	if e.N_used > 0 {
		c.selRows[k] += int32(cnt / int(e.N_used))
	}
	for _, id := range e.Ids[:cnt] {
		if id < 0 || id > 0xffff {
			continue
		}
		c.experts[event.ExpertSel{Token: e.Hdr.Token, Layer: uint16(layer), Expert: uint16(id)}]++
	}
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

// picksUnseenCalls are the llama_decode calls that computed tokens (a CPU
// graph ran, or the router's picks were seen, in them) in which a MoE
// layer whose experts lived on the CPU side (or in a buffer not named)
// and that is not unseen run-wide (runWide) got fewer rows of picks than
// the call had tokens: with layers on a GPU, llama.cpp's scheduler
// offloads the MUL_MAT_ID of a large batch (32 tokens in ggml-vulkan and
// ggml-cuda, GGML_OP_OFFLOAD_MIN_BATCH) to the GPU, where no CPU graph
// reads its ids; a ubatch split of the call can leave only some of its
// rows on the CPU. The model's last layer computes only the rows whose
// logits are wanted: one seen row counts it as seen. That is the last
// layer with picks unless a later layer's experts lived on a GPU
// (--n-cpu-moe N), whose CPU layers all compute every row. None in a run
// without picks (rundir.Meta.PicksNA and runWide say why).
func picksUnseenCalls(tensors []event.Tensor, tokens []event.TokenInfo, rows map[selKey]int32, graphed map[uint32]bool, runWide []uint16) []event.PicksUnseenCall {
	if len(rows) == 0 {
		return nil
	}
	last, offload := -1, false
	for k := range rows {
		last = max(last, int(k.layer))
	}
	cpu := map[uint16]bool{}
	gpuAfter := false
	for _, t := range tensors {
		offCPU := t.OffCPU()
		offload = offload || offCPU && !t.Pseudo()
		if t.Experts > 0 && t.Layer >= 0 && t.Layer <= 0xffff && !offCPU && !slices.Contains(runWide, uint16(t.Layer)) {
			cpu[uint16(t.Layer)] = true
		}
		gpuAfter = gpuAfter || t.Experts > 0 && offCPU && t.Layer > last
	}
	if gpuAfter {
		last = -1
	}
	layers := slices.Sorted(maps.Keys(cpu))
	picked := map[uint32]bool{}
	for k := range rows {
		picked[k.token] = true
	}
	var calls []event.PicksUnseenCall
	for _, t := range tokens {
		if t.StartNS == 0 || t.NTokens <= 0 || !graphed[t.Token] && !picked[t.Token] {
			continue
		}
		call := event.PicksUnseenCall{Token: t.Token, Phase: t.Phase, Tokens: t.NTokens, Offload: offload}
		for _, l := range layers {
			n := rows[selKey{t.Token, l}]
			if n >= t.NTokens || int(l) == last && n > 0 {
				continue
			}
			call.Layers = append(call.Layers, event.PicksUnseenLayer{Layer: l, Rows: n})
		}
		if len(call.Layers) > 0 {
			calls = append(calls, call)
		}
	}
	return calls
}

// picksUnseen are the layers with expert tensors and no pick in a run
// that called llama_decode (decoded): in a run with picks, each such
// layer; in one without, the layers whose experts lived in a buffer of
// no CPU (-ngl without --cpu-moe: the GPU ran every router). None in a
// run that decoded nothing; a run whose probe attached nowhere is
// rundir.Meta.PicksNA's case.
func picksUnseen(tensors []event.Tensor, sel []event.ExpertSel, decoded bool) []uint16 {
	if !decoded {
		return nil
	}
	seen := map[int]bool{}
	for _, e := range sel {
		seen[int(e.Layer)] = true
	}
	var unseen []uint16
	for _, t := range tensors {
		offCPU := t.Device != "" && !strings.HasPrefix(t.Device, "CPU")
		if t.Experts > 0 && t.Layer >= 0 && t.Layer <= 0xffff && !seen[t.Layer] && (len(sel) > 0 || offCPU) {
			seen[t.Layer] = true
			unseen = append(unseen, uint16(t.Layer))
		}
	}
	slices.Sort(unseen)
	return unseen
}

// String summarises a Result for logs.
func (r *Result) String() string {
	return fmt.Sprintf("%d tokens, %d tensors, %d aggregate rows, %d events", len(r.Tokens), len(r.Tensors), len(r.Aggs), r.Stats.Events)
}

// Tensors is the tensor dictionary: pseudo tensors, then every model's
// tensors in metadata order. Ops of graph nodes fill in as EV_NODE arrive.
func (c *Correlator) Tensors() []event.Tensor { return c.tensors }
