package recorder

import (
	"testing"

	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/wire"
)

// The summary's faults are what correlate charges: completed ones, each
// record once and each of the kernel's counts as its count, with their
// stall; a fault never completed is none of them.
func TestTheSummaryCountsFaultsAsTheRecordAndTheKernelsCountsHoldThem(t *testing.T) {
	recs := []any{
		&wire.FaultEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT), Ts: 100}, StartTs: 90, Class: uint8(wire.FaultClassFAULT_MAJOR)},
		&wire.FaultEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT), Ts: 200}, StartTs: 195, Class: uint8(wire.FaultClassFAULT_MINOR)},
		&wire.FaultEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT), Ts: 300}, StartTs: 250, Class: uint8(wire.FaultClassFAULT_UNACCOUNTED)},
		&wire.FaultCountEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT_COUNT), Ts: 400}, Count: 7, StallNs: 70, Class: uint8(wire.FaultClassFAULT_MINOR), Where: uint8(wire.FaultWhereFAULT_WHERE_ANON)},
		&wire.FaultCountEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT_COUNT), Ts: 400}, Count: 2, StallNs: 2000, Class: uint8(wire.FaultClassFAULT_MAJOR), Where: uint8(wire.FaultWhereFAULT_WHERE_OTHER)},
		&wire.FaultCountEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT_COUNT), Ts: 400}, Count: 3, Class: uint8(wire.FaultClassFAULT_UNACCOUNTED), Where: uint8(wire.FaultWhereFAULT_WHERE_ANON)},
	}
	var s liveStats
	var ds ingest.DecodeStats
	m := newModels(func(string) {}, nil)
	for _, r := range recs {
		var b []byte
		switch e := r.(type) {
		case *wire.FaultEvent:
			b = ingest.Bytes(e)
		case *wire.FaultCountEvent:
			b = ingest.Bytes(e)
		}
		d, ok := ingest.Decode(b, &ds)
		if !ok {
			t.Fatalf("%+v does not decode", r)
		}
		s.observe(d, m)
	}
	got := s.snapshot(0)
	if got.Major != 3 || got.Minor != 8 || got.StallNS != 10+5+70+2000 {
		t.Errorf("summary: %d major, %d minor, stall %d; want 3, 8, 2085", got.Major, got.Minor, got.StallNS)
	}
}
