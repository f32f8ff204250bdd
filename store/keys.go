// Package store stores a run's attributed events, aggregates and timeline
// in a badger database (DIR/db) and answers queries over it.
//
// Writer (Begin, Create, Event, Mark, Commit) writes a store for package
// pipeline, which drives the ingest (spool → ingest.Decode → correlate →
// Writer); it is crash-safe (see Writer). Open(dir) opens the store
// read-only for queries (Store.Query), exports and readers (Store.EachToken,
// Store.Aggs, Store.Events, Store.Records, Store.Marks) and tests; any
// number may be open at once.
//
// The key layout is described in ADR-001-keys.md; this file is its single
// implementation.
package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/varint"
)

// Table prefixes: the first byte of every key.
const (
	pSummary   byte = 0x01 // "summary" → JSON Summary; written last: the completion marker
	pTensor    byte = 0x02 // tensor id u32 → JSON event.Tensor
	pOp        byte = 0x03 // op id u32 → name
	pChunk     byte = 0x10 // min ts u64 | chunk seq u32 → packed events
	pIdxTensor byte = 0x11 // tensor u32 | chunk key suffix → ∅
	pIdxLayer  byte = 0x12 // layer+1 u16 | chunk key suffix → ∅
	pIdxExpert byte = 0x13 // expert+1 u16 | chunk key suffix → ∅
	pIdxToken  byte = 0x14 // token u32 | chunk key suffix → ∅
	pIdxOp     byte = 0x15 // op u32 | chunk key suffix → ∅
	pTokenAgg  byte = 0x20 // token u32 → TokenInfo
	pAggTensor byte = 0x21 // tensor u32 | expert+1 u16 | token u32 | op u32 → Counters
	pAggToken  byte = 0x22 // token u32 | tensor u32 | expert+1 u16 → Counters, ops folded
	pExpertSel byte = 0x23 // token u32 | layer u16 | expert u16 → count u64
	pAggTT     byte = 0x24 // tensor u32 | token u32 → Counters, experts and ops folded
	pAggPhase  byte = 0x25 // tensor u32 | phase u8 | expert+1 u16 | op u32 → Counters, tokens folded by phase
	pSelPhase  byte = 0x26 // phase u8 | layer u16 | expert u16 → count u64, tokens folded by phase
	pTTPhase   byte = 0x27 // tensor u32 | phase u8 → Counters, tokens folded by phase, experts and ops folded
	pMarks     byte = 0x30 // chunk seq u32 → packed timeline marks, in spool order
)

var summaryKey = []byte{pSummary, 's', 'u', 'm', 'm', 'a', 'r', 'y'}

// FormatVersion changes when a store written by an older iocorr would be
// misread; an ingest rebuilds a store of another version.
const FormatVersion = 13 // 13: the counter fault_preempted_ns

var be = binary.BigEndian

// Tables scanned whole are read by their prefix.
var (
	tensorTable    = []byte{pTensor}
	opTable        = []byte{pOp}
	chunkTable     = []byte{pChunk}
	tokenTable     = []byte{pTokenAgg}
	aggTensorTable = []byte{pAggTensor}
	aggTokenTable  = []byte{pAggToken}
	expertSelTable = []byte{pExpertSel}
	aggTTTable     = []byte{pAggTT}
	aggPhaseTable  = []byte{pAggPhase}
	selPhaseTable  = []byte{pSelPhase}
	ttPhaseTable   = []byte{pTTPhase}
	markTable      = []byte{pMarks}
)

// Layers and experts are stored +1, so that −1 (no layer, a dense tensor)
// is 0 and order is kept.
func plusOne[T int | int16](v T) uint16 { return uint16(v + 1) }

func u32Key(prefix byte, v uint32) []byte {
	return be.AppendUint32([]byte{prefix}, v)
}

func parseU32Key(prefix byte, what string, k []byte) (uint32, error) {
	if len(k) != 5 || k[0] != prefix {
		return 0, fmt.Errorf("bad %s key %x", what, k)
	}
	return be.Uint32(k[1:]), nil
}

func tensorKey(id uint32) []byte                  { return u32Key(pTensor, id) }
func parseTensorKey(k []byte) (uint32, error)     { return parseU32Key(pTensor, "tensor", k) }
func opKey(id uint32) []byte                      { return u32Key(pOp, id) }
func parseOpKey(k []byte) (uint32, error)         { return parseU32Key(pOp, "op", k) }
func tokenKey(token uint32) []byte                { return u32Key(pTokenAgg, token) }
func parseTokenKey(k []byte) (uint32, error)      { return parseU32Key(pTokenAgg, "token row", k) }
func aggTensorPrefix(tensor uint32) []byte        { return u32Key(pAggTensor, tensor) }
func aggTTPrefix(tensor uint32) []byte            { return u32Key(pAggTT, tensor) }
func aggTokenPrefix(token uint32) []byte          { return u32Key(pAggToken, token) }
func expertSelPrefix(token uint32) []byte         { return u32Key(pExpertSel, token) }
func isSummaryKey(k []byte) bool                  { return string(k) == string(summaryKey) }
func (ix chunkIndex) valuePrefix(v uint32) []byte { return ix.appendValue([]byte{ix.prefix}, v) }

// chunkSuffixLen is min ts u64 | seq u32, shared by the chunk key and the
// index keys so that an index hit names its chunk without a lookup.
const chunkSuffixLen = 12

func chunkKey(minTs uint64, seq uint32) []byte {
	k := make([]byte, 1+chunkSuffixLen)
	k[0] = pChunk
	be.PutUint64(k[1:], minTs)
	be.PutUint32(k[9:], seq)
	return k
}

func parseChunkKey(k []byte) (minTs uint64, seq uint32, err error) {
	if len(k) != 1+chunkSuffixLen || k[0] != pChunk {
		return 0, 0, fmt.Errorf("bad event chunk key %x", k)
	}
	return be.Uint64(k[1:]), be.Uint32(k[9:]), nil
}

// chunkIndex is one secondary index of event chunks: prefix | value
// (width bytes) | chunk key suffix → ∅.
type chunkIndex struct {
	prefix byte
	width  int // 2 or 4
}

// The chunk indexes, in chunkIndexes order.
var (
	ixTensor = chunkIndex{pIdxTensor, 4}
	ixLayer  = chunkIndex{pIdxLayer, 2}  // layer+1
	ixExpert = chunkIndex{pIdxExpert, 2} // expert+1
	ixToken  = chunkIndex{pIdxToken, 4}
	ixOp     = chunkIndex{pIdxOp, 4}

	chunkIndexes = [...]chunkIndex{ixTensor, ixLayer, ixExpert, ixToken, ixOp}
)

// chunkIndexValues are an event's values in the chunk indexes, in
// chunkIndexes order; layer is the layer of the event's tensor.
func chunkIndexValues(e *event.Event, layer int) [len(chunkIndexes)]uint32 {
	return [...]uint32{e.Tensor, uint32(plusOne(layer)), uint32(plusOne(e.Expert)), e.Token, e.Op}
}

// layerIndexValue and expertIndexValue are what a filter looks up.
func layerIndexValue(layer int) uint32     { return uint32(plusOne(layer)) }
func expertIndexValue(expert int16) uint32 { return uint32(plusOne(expert)) }

func (ix chunkIndex) appendValue(dst []byte, v uint32) []byte {
	if ix.width == 2 {
		return be.AppendUint16(dst, uint16(v))
	}
	return be.AppendUint32(dst, v)
}

// key appends the index key of value v naming the chunk of key chunk.
func (ix chunkIndex) key(dst []byte, v uint32, chunk []byte) []byte {
	dst = ix.appendValue(append(dst, ix.prefix), v)
	return append(dst, chunk[1:]...)
}

// parseChunkIndexKey parses a key of any chunk index: which index, the
// value, and the key of the chunk it names.
func parseChunkIndexKey(k []byte) (ix chunkIndex, v uint32, chunk []byte, err error) {
	for _, c := range chunkIndexes {
		if len(k) > 0 && k[0] == c.prefix {
			ix = c
		}
	}
	if ix.width == 0 || len(k) != 1+ix.width+chunkSuffixLen {
		return chunkIndex{}, 0, nil, fmt.Errorf("bad event index key %x", k)
	}
	if ix.width == 2 {
		v = uint32(be.Uint16(k[1:]))
	} else {
		v = be.Uint32(k[1:])
	}
	return ix, v, append([]byte{pChunk}, k[1+ix.width:]...), nil
}

func aggTensorKey(k event.AggKey) []byte {
	b := make([]byte, 0, 15)
	b = append(b, pAggTensor)
	b = be.AppendUint32(b, k.Tensor)
	b = be.AppendUint16(b, plusOne(k.Expert))
	b = be.AppendUint32(b, k.Token)
	return be.AppendUint32(b, k.Op)
}

func aggTokenKey(k event.AggKey) []byte {
	b := make([]byte, 0, 11)
	b = append(b, pAggToken)
	b = be.AppendUint32(b, k.Token)
	b = be.AppendUint32(b, k.Tensor)
	return be.AppendUint16(b, plusOne(k.Expert))
}

func aggTTKey(tensor, token uint32) []byte {
	b := make([]byte, 0, 9)
	b = append(b, pAggTT)
	b = be.AppendUint32(b, tensor)
	return be.AppendUint32(b, token)
}

func parseAggTensorKey(b []byte) (event.AggKey, error) {
	if len(b) != 15 || b[0] != pAggTensor {
		return event.AggKey{}, fmt.Errorf("bad aggregate key %x", b)
	}
	return event.AggKey{Tensor: be.Uint32(b[1:]), Expert: int16(be.Uint16(b[5:])) - 1, Token: be.Uint32(b[7:]), Op: be.Uint32(b[11:])}, nil
}

func parseAggTokenKey(b []byte) (event.AggKey, error) {
	if len(b) != 11 || b[0] != pAggToken {
		return event.AggKey{}, fmt.Errorf("bad aggregate key %x", b)
	}
	return event.AggKey{Token: be.Uint32(b[1:]), Tensor: be.Uint32(b[5:]), Expert: int16(be.Uint16(b[9:])) - 1}, nil
}

// parseAggTTKey's rows have experts and ops folded: Expert −1, Op 0.
func parseAggTTKey(b []byte) (event.AggKey, error) {
	if len(b) != 9 || b[0] != pAggTT {
		return event.AggKey{}, fmt.Errorf("bad aggregate key %x", b)
	}
	return event.AggKey{Tensor: be.Uint32(b[1:]), Token: be.Uint32(b[5:]), Expert: -1}, nil
}

// phaseAggKey names a row of the run's totals: the finest row's key with
// its token replaced by the token's phase, so that a query selecting no
// tokens reads a row per tensor, expert and op of each phase, however
// long the run.
type phaseAggKey struct {
	Tensor uint32
	Phase  uint8
	Expert int16
	Op     uint32
}

func aggPhaseKey(k phaseAggKey) []byte {
	b := make([]byte, 0, 12)
	b = append(b, pAggPhase)
	b = be.AppendUint32(b, k.Tensor)
	b = append(b, k.Phase)
	b = be.AppendUint16(b, plusOne(k.Expert))
	return be.AppendUint32(b, k.Op)
}

func aggPhasePrefix(tensor uint32) []byte { return u32Key(pAggPhase, tensor) }

func parseAggPhaseKey(b []byte) (phaseAggKey, error) {
	if len(b) != 12 || b[0] != pAggPhase {
		return phaseAggKey{}, fmt.Errorf("bad phase total key %x", b)
	}
	return phaseAggKey{Tensor: be.Uint32(b[1:]), Phase: b[5], Expert: int16(be.Uint16(b[6:])) - 1, Op: be.Uint32(b[8:])}, nil
}

// ttPhaseKey names a tensor's total in one phase, experts and ops folded.
func ttPhaseKey(tensor uint32, phase uint8) []byte {
	return append(u32Key(pTTPhase, tensor), phase)
}

func ttPhasePrefix(tensor uint32) []byte { return u32Key(pTTPhase, tensor) }

// parseTTPhaseKey's rows have experts and ops folded: Expert −1, Op 0.
func parseTTPhaseKey(b []byte) (phaseAggKey, error) {
	if len(b) != 6 || b[0] != pTTPhase {
		return phaseAggKey{}, fmt.Errorf("bad tensor total key %x", b)
	}
	return phaseAggKey{Tensor: be.Uint32(b[1:]), Phase: b[5], Expert: -1}, nil
}

// phasePick is how often the router picked an expert of a layer in the
// tokens of one phase: the picks (0x23) with tokens folded by phase.
type phasePick struct {
	Phase         uint8
	Layer, Expert uint16
	Count         uint64
}

func selPhaseKey(p *phasePick) []byte {
	k := make([]byte, 0, 6)
	k = append(k, pSelPhase, p.Phase)
	k = be.AppendUint16(k, p.Layer)
	return be.AppendUint16(k, p.Expert)
}

func appendPhasePickValue(b []byte, p *phasePick) []byte { return be.AppendUint64(b, p.Count) }

func parsePhasePick(k, v []byte) (phasePick, error) {
	if len(k) != 6 || k[0] != pSelPhase || len(v) != 8 {
		return phasePick{}, fmt.Errorf("bad phase pick row %x → %x", k, v)
	}
	return phasePick{Phase: k[1], Layer: be.Uint16(k[2:]), Expert: be.Uint16(k[4:]), Count: be.Uint64(v)}, nil
}

// expertSelKey is token u32 | layer u16 | expert u16; its value the count u64.
func expertSelKey(e *event.ExpertSel) []byte {
	k := make([]byte, 0, 9)
	k = append(k, pExpertSel)
	k = be.AppendUint32(k, e.Token)
	k = be.AppendUint16(k, e.Layer)
	return be.AppendUint16(k, e.Expert)
}

func appendExpertSelValue(b []byte, e *event.ExpertSel) []byte {
	return be.AppendUint64(b, e.Count)
}

func parseExpertSel(k, v []byte) (event.ExpertSel, error) {
	if len(k) != 9 || k[0] != pExpertSel || len(v) != 8 {
		return event.ExpertSel{}, fmt.Errorf("bad expert selection row %x → %x", k, v)
	}
	return event.ExpertSel{Token: be.Uint32(k[1:]), Layer: be.Uint16(k[5:]), Expert: be.Uint16(k[7:]), Count: be.Uint64(v)}, nil
}

// Counters are values, not keys: event.NumCounters uvarints in
// event.Counters.Values order. Most are 0 in any row (a row has
// faults or evictions, rarely all), so a row is ~15 bytes, not 96.
func appendCounters(b []byte, c *event.Counters) []byte {
	for _, v := range c.Values() {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func parseCounters(b []byte, c *event.Counters) error {
	n, err := parseCountersN(b, c)
	if err == nil && n != len(b) {
		return fmt.Errorf("counters value of %d bytes has %d bytes too many", len(b), len(b)-n)
	}
	return err
}

// parseCountersN parses counters at the start of b and says how many
// bytes they took.
func parseCountersN(b []byte, c *event.Counters) (int, error) {
	var v [event.NumCounters]uint64
	n := 0
	for i := range v {
		x, k := binary.Uvarint(b[n:])
		if k <= 0 {
			return 0, fmt.Errorf("counters value of %d bytes is cut short", len(b))
		}
		v[i] = x
		n += k
	}
	c.SetValues(&v)
	return n, nil
}

// TokenInfo: counters, then phase u8, n_tokens i32, start u64, end u64,
// tensors u32, experts u32, then the sequence set u64 and its state u32
// (format 7), then the tokens per sequence, u16 each (format 8).
const tokenTailLen = 1 + 4 + 8*2 + 4*2 + 8 + 4 + 2*event.SeqCounted

func appendTokenInfo(b []byte, t *event.TokenInfo) []byte {
	b = appendCounters(b, &t.Counters)
	b = append(b, t.Phase)
	b = be.AppendUint32(b, uint32(t.NTokens))
	b = be.AppendUint64(b, t.StartNS)
	b = be.AppendUint64(b, t.EndNS)
	b = be.AppendUint32(b, t.TensorsTouched)
	b = be.AppendUint32(b, t.ExpertsTouched)
	b = be.AppendUint64(b, t.Seqs)
	b = be.AppendUint32(b, t.SeqState)
	for _, n := range t.SeqTokens {
		b = be.AppendUint16(b, n)
	}
	return b
}

func parseTokenInfo(key, b []byte) (event.TokenInfo, error) {
	var t event.TokenInfo
	tok, err := parseTokenKey(key)
	if err != nil {
		return t, err
	}
	t.Token = tok
	n, err := parseCountersN(b, &t.Counters)
	if err != nil || len(b)-n != tokenTailLen {
		return t, fmt.Errorf("bad token row of %d bytes", len(b))
	}
	b = b[n:]
	t.Phase = b[0]
	t.NTokens = int32(be.Uint32(b[1:]))
	t.StartNS = be.Uint64(b[5:])
	t.EndNS = be.Uint64(b[13:])
	t.TensorsTouched = be.Uint32(b[21:])
	t.ExpertsTouched = be.Uint32(b[25:])
	t.Seqs = be.Uint64(b[29:])
	t.SeqState = be.Uint32(b[37:])
	for i := range t.SeqTokens {
		t.SeqTokens[i] = be.Uint16(b[41+2*i:])
	}
	return t, nil
}

// A chunk value is chunkEncoding, the event count as a uvarint, then the
// events in time order, each as varints relative to the previous event:
//
//	ts−prev.ts        uvarint (a chunk is sorted by time)
//	kind|phase|class  one byte: kind<<5 | phase<<3 | class (a read's class is
//	                  its call kind, up to 6: format 5 kept 2 bits of it)
//	tensor            uvarint
//	expert+1          uvarint
//	token−prev.token  zigzag varint
//	op                uvarint
//	tid−prev.tid      zigzag varint
//	trigger+1         uvarint (NoTensor is 0)
//	offset            zigzag varint
//	bytes             uvarint
//	duration          uvarint
//	req−prev.req      zigzag varint (held-back page adds come out of order)
//
// An event is ~18 bytes instead of 57 fixed ones. Chunks are only ever read
// whole, so sequential decoding costs nothing, and every byte saved is a
// byte badger's value log does not copy three times on the way to disk.
const chunkEncoding = 2

// maxEventLen bounds one encoded event: 11 varints of ≤10 bytes, 1 flag byte.
const maxEventLen = 11*10 + 1

func appendChunk(b []byte, evs []event.Event) []byte {
	b = append(b, chunkEncoding)
	b = binary.AppendUvarint(b, uint64(len(evs)))
	var prev event.Event
	for i := range evs {
		e := &evs[i]
		b = binary.AppendUvarint(b, e.Ts-prev.Ts)
		b = append(b, byte(e.Kind)<<5|(e.Phase&3)<<3|e.Class&7)
		b = binary.AppendUvarint(b, uint64(e.Tensor))
		b = binary.AppendUvarint(b, uint64(uint16(e.Expert+1)))
		b = binary.AppendVarint(b, int64(e.Token)-int64(prev.Token))
		b = binary.AppendUvarint(b, uint64(e.Op))
		b = binary.AppendVarint(b, int64(e.Tid)-int64(prev.Tid))
		b = binary.AppendUvarint(b, uint64(e.Trigger+1))
		b = binary.AppendVarint(b, e.Offset)
		b = binary.AppendUvarint(b, e.Bytes)
		b = binary.AppendUvarint(b, e.Dur)
		b = binary.AppendVarint(b, int64(int32(e.Req-prev.Req))) // wraps back on decoding
		prev = *e
	}
	return b
}

// chunkReader decodes a chunk value event by event.
type chunkReader struct {
	r    varint.Reader
	n    int // events left
	prev event.Event
	err  error
}

var errChunkShort = errors.New("event chunk cut short")

func newChunkReader(v []byte) (chunkReader, error) {
	if len(v) < 2 || v[0] != chunkEncoding {
		return chunkReader{}, fmt.Errorf("event chunk of unknown encoding")
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || n > uint64(len(v)) {
		return chunkReader{}, fmt.Errorf("event chunk with a bad count")
	}
	return chunkReader{r: varint.Reader{B: v[1+k:]}, n: int(n)}, nil
}

// next decodes the next event into e; false at the end or on an error.
func (c *chunkReader) next(e *event.Event) bool {
	if c.n == 0 || c.err != nil {
		return false
	}
	c.n--
	p, r := &c.prev, &c.r
	e.Ts = p.Ts + r.Uvarint()
	f := r.Byte()
	e.Kind, e.Phase, e.Class = event.Kind(f>>5), f>>3&3, f&7
	e.Tensor = uint32(r.Uvarint())
	e.Expert = int16(uint16(r.Uvarint())) - 1
	e.Token = uint32(int64(p.Token) + r.Varint())
	e.Op = uint32(r.Uvarint())
	e.Tid = uint32(int64(p.Tid) + r.Varint())
	e.Trigger = uint32(r.Uvarint()) - 1
	e.Offset = r.Varint()
	e.Bytes = r.Uvarint()
	e.Dur = r.Uvarint()
	e.Req = p.Req + uint32(r.Varint())
	if r.Err != nil {
		c.err = errChunkShort
		return false
	}
	*p = *e
	return true
}

// markChunkKey names the seq'th chunk of timeline marks.
func markChunkKey(seq uint32) []byte { return u32Key(pMarks, seq) }

func parseMarkChunkKey(k []byte) (uint32, error) { return parseU32Key(pMarks, "timeline chunk", k) }

// A timeline chunk value is markEncoding, the mark count as a uvarint,
// then the marks in spool order, every field of each whatever its kind
// (a field a kind does not use is 0: one byte):
//
//	ts−prev.ts                        zigzag varint (spool order is per CPU, not time)
//	kind, phase                       one byte each
//	tid, tgid, token                  uvarint
//	begin                             uvarint
//	n_tokens, ret                     zigzag varint
//	seq, nodes, weight nodes, op      uvarint
//	prev state                        zigzag varint
//	next tid, next tgid               uvarint
//	name                              uvarint length, bytes
const markEncoding = 1

func appendMarkChunk(b []byte, ms []event.Mark) []byte {
	b = append(b, markEncoding)
	b = binary.AppendUvarint(b, uint64(len(ms)))
	var prevTs uint64
	for i := range ms {
		m := &ms[i]
		b = binary.AppendVarint(b, int64(m.Ts-prevTs))
		prevTs = m.Ts
		b = append(b, byte(m.Kind), m.Phase)
		for _, v := range [...]uint64{uint64(m.Tid), uint64(m.Tgid), uint64(m.Token), m.Begin} {
			b = binary.AppendUvarint(b, v)
		}
		b = binary.AppendVarint(b, int64(m.NTokens))
		b = binary.AppendVarint(b, int64(m.Ret))
		for _, v := range [...]uint32{m.Seq, m.Nodes, m.WeightNodes, m.Op} {
			b = binary.AppendUvarint(b, uint64(v))
		}
		b = binary.AppendVarint(b, m.PrevState)
		b = binary.AppendUvarint(b, uint64(m.NextTid))
		b = binary.AppendUvarint(b, uint64(m.NextTgid))
		b = binary.AppendUvarint(b, uint64(len(m.Name)))
		b = append(b, m.Name...)
	}
	return b
}

// parseMarkChunk calls fn for each mark of a timeline chunk value.
func parseMarkChunk(v []byte, fn func(*event.Mark) error) error {
	if len(v) < 2 || v[0] != markEncoding {
		return fmt.Errorf("timeline chunk of unknown encoding")
	}
	n, k := binary.Uvarint(v[1:])
	if k <= 0 || n > uint64(len(v)) {
		return fmt.Errorf("timeline chunk with a bad count")
	}
	r := varint.Reader{B: v[1+k:]}
	var bad error
	u32 := func() uint32 {
		x := r.Uvarint()
		if x > 0xffffffff {
			bad = fmt.Errorf("timeline chunk field out of range")
		}
		return uint32(x)
	}
	i32 := func() int32 {
		x := r.Varint()
		if x != int64(int32(x)) {
			bad = fmt.Errorf("timeline chunk field out of range")
		}
		return int32(x)
	}
	var m event.Mark
	var prevTs uint64
	for range n {
		m = event.Mark{Ts: prevTs + uint64(r.Varint())}
		prevTs = m.Ts
		m.Kind, m.Phase = event.MarkKind(r.Byte()), r.Byte()
		m.Tid, m.Tgid, m.Token, m.Begin = u32(), u32(), u32(), r.Uvarint()
		m.NTokens, m.Ret = i32(), i32()
		m.Seq, m.Nodes, m.WeightNodes, m.Op = u32(), u32(), u32(), u32()
		m.PrevState = r.Varint()
		m.NextTid, m.NextTgid = u32(), u32()
		m.Name = r.String()
		if r.Err != nil {
			return fmt.Errorf("timeline chunk cut short")
		}
		if bad != nil {
			return bad
		}
		if err := fn(&m); err != nil {
			return err
		}
	}
	if len(r.B) != 0 {
		return fmt.Errorf("timeline chunk has %d bytes too many", len(r.B))
	}
	return nil
}

func tensorValue(t *event.Tensor) ([]byte, error) { return json.Marshal(t) }

// parseTensor parses a tensor dictionary row; its key and the id inside
// must agree.
func parseTensor(k, v []byte) (event.Tensor, error) {
	var t event.Tensor
	id, err := parseTensorKey(k)
	if err != nil {
		return t, err
	}
	if err := json.Unmarshal(v, &t); err != nil {
		return t, fmt.Errorf("tensor dictionary: %w", err)
	}
	if t.ID != id {
		return t, fmt.Errorf("tensor dictionary: row %d holds tensor %d", id, t.ID)
	}
	return t, nil
}

// An op dictionary row's value is the op's name.
func opValue(name string) []byte { return []byte(name) }

func parseOp(k, v []byte) (uint32, string, error) {
	id, err := parseOpKey(k)
	return id, string(v), err
}

func summaryValue(s *Summary) ([]byte, error) { return json.Marshal(s) }

func parseSummary(v []byte, s *Summary) error {
	if err := json.Unmarshal(v, s); err != nil {
		return fmt.Errorf("store summary: %w", err)
	}
	return nil
}
