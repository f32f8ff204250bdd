package correlate

import (
	"math/rand/v2"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/wire"
)

// aggSum is an AggSink that sums the rows handed to it, as the store's
// writer does, and remembers how many pieces came.
type aggSum struct {
	collect
	rows   map[event.AggKey]event.Counters
	pieces int
}

func (s *aggSum) Agg(a *event.Agg) error {
	c := s.rows[a.AggKey]
	c.Add(&a.Counters)
	s.rows[a.AggKey] = c
	s.pieces++
	return nil
}

func TestRowsHandedOverInPiecesSumToTheRowsHeldWhole(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	var recs [][]byte
	tok := uint32(1)
	for i := range 20000 {
		// Tokens mostly advance, and records of earlier tokens come late.
		if rng.IntN(200) == 0 {
			tok++
		}
		rt := tok
		if rng.IntN(10) == 0 && tok > 4 {
			rt = tok - uint32(rng.IntN(4))
		}
		h := wire.EventHdr{Ts: uint64(i) * 100, Tid: uint32(rng.IntN(3)), Tgid: 50, Token: rt, Phase: 2, Op: uint32(rng.IntN(2))}
		off := uint64(rng.Int64N(65536)) &^ 4095
		switch rng.IntN(4) {
		case 0:
			h.Type = uint16(wire.EventTypeEV_FAULT)
			recs = append(recs, ingest.Bytes(&wire.FaultEvent{Hdr: h, StartTs: h.Ts - 50, Ino: modelIno, Dev: modelDev, FileOff: off, Class: uint8(rng.IntN(2))}))
		case 1:
			h.Type = uint16(wire.EventTypeEV_PAGE_ADD)
			recs = append(recs, ingest.Bytes(&wire.PageEvent{Hdr: h, Ino: modelIno, Dev: modelDev, Index: off / 4096}))
		case 2:
			h.Type = uint16(wire.EventTypeEV_PAGE_DEL)
			recs = append(recs, ingest.Bytes(&wire.PageEvent{Hdr: h, Ino: modelIno, Dev: modelDev, Index: off / 4096, Order: 2}))
		case 3:
			h.Type = uint16(wire.EventTypeEV_BLOCK)
			recs = append(recs, ingest.Bytes(&wire.BlockEvent{Hdr: h, IssueTs: h.Ts - 10,
				Sector: (partStart*512 + physBase + off) / 512, Dev: diskDev, Bytes: 8192}))
		}
	}
	for _, tc := range []struct {
		name    string
		maxHeld int
	}{
		{"tokens handed over as the spool moves on", maxHeldAggs},
		{"every row handed over whenever a few are held", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole, err := New(testMeta(), &collect{})
			if err != nil {
				t.Fatal(err)
			}
			want, err := whole.Attribute(recs)
			if err != nil {
				t.Fatal(err)
			}
			sink := &aggSum{rows: map[event.AggKey]event.Counters{}}
			c, err := New(testMeta(), sink)
			if err != nil {
				t.Fatal(err)
			}
			c.maxHeld = tc.maxHeld
			got, err := c.Attribute(recs)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Aggs) != 0 {
				t.Errorf("Finish returned %d rows it had handed over", len(got.Aggs))
			}
			if len(sink.rows) != len(want.Aggs) || sink.pieces <= len(want.Aggs) {
				t.Errorf("sink has %d rows from %d pieces, the whole correlator %d rows; want the same rows, some in pieces", len(sink.rows), sink.pieces, len(want.Aggs))
			}
			for _, a := range want.Aggs {
				if sink.rows[a.AggKey] != a.Counters {
					t.Errorf("row %+v: handed over %+v, held whole %+v", a.AggKey, sink.rows[a.AggKey], a.Counters)
				}
			}
			if got.Stats.HeldAggsPeak > uint64(max(tc.maxHeld, 1)) && tc.maxHeld < maxHeldAggs {
				t.Errorf("held up to %d rows, bound %d", got.Stats.HeldAggsPeak, tc.maxHeld)
			}
			if len(sink.evs) != len(whole.sink.(*collect).evs) {
				t.Errorf("%d events, the whole correlator %d", len(sink.evs), len(whole.sink.(*collect).evs))
			}
		})
	}
}
