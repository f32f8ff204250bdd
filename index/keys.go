// Package index stores a run's attributed events and aggregates in a
// badger database (DIR/db) and answers queries over it. The key layout is
// described in ADR-001-keys.md; this file is its single implementation.
package index

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/iocorr/iocorr/correlate"
)

// Table prefixes: the first byte of every key.
const (
	pSummary   byte = 0x01 // "summary" → JSON Summary; written last: the completion marker
	pTensor    byte = 0x02 // tensor id u32 → JSON correlate.Tensor
	pOp        byte = 0x03 // op id u32 → name
	pChunk     byte = 0x10 // min ts u64 | chunk seq u32 → packed events
	pIdxTensor byte = 0x11 // tensor u32 | chunk key suffix → ∅
	pIdxLayer  byte = 0x12 // layer+1 u16 | chunk key suffix → ∅
	pIdxExpert byte = 0x13 // expert+1 u16 | chunk key suffix → ∅
	pIdxToken  byte = 0x14 // token u32 | chunk key suffix → ∅
	pIdxOp     byte = 0x15 // op u32 | chunk key suffix → ∅
	pTokenAgg  byte = 0x20 // token u32 → TokenInfo
	pAggTensor byte = 0x21 // tensor u32 | expert+1 u16 | token u32 | op u32 → Counters
	pAggToken  byte = 0x22 // token u32 | tensor u32 | expert+1 u16 | op u32 → Counters
	pExpertSel byte = 0x23 // token u32 | layer u16 | expert u16 → count u64
)

var summaryKey = []byte{pSummary, 's', 'u', 'm', 'm', 'a', 'r', 'y'}

// FormatVersion changes when a store written by an older iocorr would be
// misread; Build rebuilds a store of another version.
const FormatVersion = 1

var be = binary.BigEndian

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

// idxKey appends prefix | field (width bytes) | chunk suffix.
func idxKey(dst []byte, prefix byte, field uint64, width int, suffix []byte) []byte {
	dst = append(dst, prefix)
	switch width {
	case 2:
		dst = be.AppendUint16(dst, uint16(field))
	case 4:
		dst = be.AppendUint32(dst, uint32(field))
	}
	return append(dst, suffix...)
}

func u32Key(prefix byte, v uint32) []byte {
	return be.AppendUint32([]byte{prefix}, v)
}

func aggTensorKey(k correlate.AggKey) []byte {
	b := make([]byte, 0, 15)
	b = append(b, pAggTensor)
	b = be.AppendUint32(b, k.Tensor)
	b = be.AppendUint16(b, uint16(k.Expert+1))
	b = be.AppendUint32(b, k.Token)
	return be.AppendUint32(b, k.Op)
}

func aggTokenKey(k correlate.AggKey) []byte {
	b := make([]byte, 0, 15)
	b = append(b, pAggToken)
	b = be.AppendUint32(b, k.Token)
	b = be.AppendUint32(b, k.Tensor)
	b = be.AppendUint16(b, uint16(k.Expert+1))
	return be.AppendUint32(b, k.Op)
}

func parseAggTensorKey(b []byte) (correlate.AggKey, error) {
	if len(b) != 15 || b[0] != pAggTensor {
		return correlate.AggKey{}, fmt.Errorf("bad aggregate key %x", b)
	}
	return correlate.AggKey{Tensor: be.Uint32(b[1:]), Expert: int16(be.Uint16(b[5:])) - 1, Token: be.Uint32(b[7:]), Op: be.Uint32(b[11:])}, nil
}

func parseAggTokenKey(b []byte) (correlate.AggKey, error) {
	if len(b) != 15 || b[0] != pAggToken {
		return correlate.AggKey{}, fmt.Errorf("bad aggregate key %x", b)
	}
	return correlate.AggKey{Token: be.Uint32(b[1:]), Tensor: be.Uint32(b[5:]), Expert: int16(be.Uint16(b[9:])) - 1, Op: be.Uint32(b[11:])}, nil
}

// Counters: ten u64, fixed order.
const countersLen = 10 * 8

func appendCounters(b []byte, c *correlate.Counters) []byte {
	for _, v := range [...]uint64{c.Faults, c.Major, c.Minor, c.Unaccounted, c.StallNS, c.AddedBytes, c.TriggerBytes, c.EvictedBytes, c.ReadBytes, c.BlockReqs} {
		b = be.AppendUint64(b, v)
	}
	return b
}

func parseCounters(b []byte, c *correlate.Counters) error {
	if len(b) < countersLen {
		return fmt.Errorf("counters value of %d bytes, want %d", len(b), countersLen)
	}
	for i, p := range [...]*uint64{&c.Faults, &c.Major, &c.Minor, &c.Unaccounted, &c.StallNS, &c.AddedBytes, &c.TriggerBytes, &c.EvictedBytes, &c.ReadBytes, &c.BlockReqs} {
		*p = be.Uint64(b[i*8:])
	}
	return nil
}

// TokenInfo: counters, then phase u8, n_tokens i32, start u64, end u64,
// pages added u64, pages evicted u64, tensors u32, experts u32.
const tokenInfoLen = countersLen + 1 + 4 + 8*4 + 4*2

func appendTokenInfo(b []byte, t *correlate.TokenInfo) []byte {
	b = appendCounters(b, &t.Counters)
	b = append(b, t.Phase)
	b = be.AppendUint32(b, uint32(t.NTokens))
	b = be.AppendUint64(b, t.StartNS)
	b = be.AppendUint64(b, t.EndNS)
	b = be.AppendUint64(b, t.PagesAdded)
	b = be.AppendUint64(b, t.PagesEvicted)
	b = be.AppendUint32(b, t.TensorsTouched)
	return be.AppendUint32(b, t.ExpertsTouched)
}

func parseTokenInfo(key, b []byte) (correlate.TokenInfo, error) {
	var t correlate.TokenInfo
	if len(key) != 5 || len(b) != tokenInfoLen {
		return t, fmt.Errorf("bad token row (key %d bytes, value %d)", len(key), len(b))
	}
	t.Token = be.Uint32(key[1:])
	parseCounters(b, &t.Counters)
	b = b[countersLen:]
	t.Phase = b[0]
	t.NTokens = int32(be.Uint32(b[1:]))
	t.StartNS = be.Uint64(b[5:])
	t.EndNS = be.Uint64(b[13:])
	t.PagesAdded = be.Uint64(b[21:])
	t.PagesEvicted = be.Uint64(b[29:])
	t.TensorsTouched = be.Uint32(b[37:])
	t.ExpertsTouched = be.Uint32(b[41:])
	return t, nil
}

// An event in a chunk value is eventLen bytes, fields in Event order.
const eventLen = 8*4 + 4*5 + 2 + 3

func appendEvent(b []byte, e *correlate.Event) []byte {
	b = be.AppendUint64(b, e.Ts)
	b = be.AppendUint64(b, e.Dur)
	b = be.AppendUint64(b, uint64(e.Offset))
	b = be.AppendUint64(b, e.Bytes)
	b = be.AppendUint32(b, e.Tensor)
	b = be.AppendUint32(b, e.Token)
	b = be.AppendUint32(b, e.Op)
	b = be.AppendUint32(b, e.Tid)
	b = be.AppendUint32(b, e.Trigger)
	b = be.AppendUint16(b, uint16(e.Expert))
	return append(b, byte(e.Kind), e.Phase, e.Class)
}

func parseEvent(b []byte, e *correlate.Event) {
	e.Ts = be.Uint64(b)
	e.Dur = be.Uint64(b[8:])
	e.Offset = int64(be.Uint64(b[16:]))
	e.Bytes = be.Uint64(b[24:])
	e.Tensor = be.Uint32(b[32:])
	e.Token = be.Uint32(b[36:])
	e.Op = be.Uint32(b[40:])
	e.Tid = be.Uint32(b[44:])
	e.Trigger = be.Uint32(b[48:])
	e.Expert = int16(be.Uint16(b[52:]))
	e.Kind = correlate.Kind(b[54])
	e.Phase = b[55]
	e.Class = b[56]
}

func tensorValue(t *correlate.Tensor) ([]byte, error) { return json.Marshal(t) }
