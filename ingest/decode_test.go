package ingest

import (
	"testing"

	"github.com/iocorr/iocorr/wire"
)

func TestDecodeCountsShortAndUnknownRecordsWithoutPanicking(t *testing.T) {
	f := wire.FaultEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_FAULT), Ts: 7}, FileOff: 42}
	good := Bytes(&f)
	unknown := append([]byte(nil), good...)
	unknown[typeOff] = 200
	tests := []struct {
		name          string
		rec           []byte
		ok            bool
		short, unkown uint64
	}{
		{"whole fault", good, true, 0, 0},
		{"empty", nil, false, 1, 0},
		{"shorter than a header", good[:hdrSize-1], false, 1, 0},
		{"header only", good[:hdrSize], false, 1, 0},
		{"fault missing its last byte", good[:len(good)-1], false, 1, 0},
		{"unknown type", unknown, false, 0, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var st DecodeStats
			r, ok := Decode(tc.rec, &st)
			if ok != tc.ok || st.Short != tc.short || st.Unknown != tc.unkown {
				t.Fatalf("ok %v stats %+v, want ok %v short %d unknown %d", ok, st, tc.ok, tc.short, tc.unkown)
			}
			if ok {
				if fe := r.Fault(); fe == nil || fe.FileOff != 42 || fe.Hdr.Ts != 7 {
					t.Errorf("fault %+v, want file_off 42 ts 7", fe)
				}
				if r.Page() != nil || r.Block() != nil {
					t.Error("a fault record must not cast to another type")
				}
				if st.Total() != 1 {
					t.Errorf("total %d, want 1", st.Total())
				}
			}
		})
	}
}

func TestDecodeDoesNotAllocate(t *testing.T) {
	p := wire.PageEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_PAGE_ADD)}}
	rec := Bytes(&p)
	var st DecodeStats
	if n := testing.AllocsPerRun(100, func() {
		r, _ := Decode(rec, &st)
		_ = r.Page()
	}); n != 0 {
		t.Errorf("%v allocations per decode, want 0", n)
	}
}

func TestDecodeReadsAPageRunEndingAfterTheWordsItNeeds(t *testing.T) {
	p := wire.PageRunEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_PAGE_RUN)}, Index: 5, NrPages: 3, Span: 70, FirstTs: 9}
	p.Pages[0], p.Pages[1] = 1, 1<<5|1
	full := Bytes(&p)
	fixed := len(full) - len(p.Pages)*8
	tests := []struct {
		name  string
		n     int
		ok    bool
		words int // bitmap words read back
	}{
		{"no bitmap", fixed, true, 0},
		{"the two words of a 70-page span", fixed + 16, true, 2},
		{"every word", len(full), true, 8},
		{"cut inside the fixed part", fixed - 1, false, 0},
		{"cut inside a word", fixed + 12, false, 0},
		{"longer than a run", len(full) + 8, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := make([]byte, tc.n)
			copy(rec, full)
			var st DecodeStats
			r, ok := Decode(rec, &st)
			if ok != tc.ok || (!ok && st.Short != 1) {
				t.Fatalf("ok %v %+v, want ok %v", ok, st, tc.ok)
			}
			if !ok {
				return
			}
			e := r.PageRun()
			want := p
			for w := tc.words; w < len(want.Pages); w++ {
				want.Pages[w] = 0
			}
			if e == nil || *e != want || r.Page() != nil {
				t.Errorf("run %+v, want %+v", e, want)
			}
		})
	}
}

func TestRecordTypeReadsHdrTypeWhereTheGeneratedHeaderHoldsIt(t *testing.T) {
	hdr := func(typ uint16) []byte {
		return Bytes(&wire.EventHdr{Ts: ^uint64(0), Tgid: 1, Tid: 2, Token: 3, Op: 4, Type: typ, Phase: 5, Cpu: 6})
	}
	for typ := uint16(1); typ < uint16(wire.EventTypeCount); typ++ {
		if got := RecordType(hdr(typ)); got != typ {
			t.Errorf("RecordType of a %s header = %d, want %d", wire.EventTypeName(uint32(typ)), got, typ)
		}
	}
	run := wire.PageRunEvent{Hdr: wire.EventHdr{Type: uint16(wire.EventTypeEV_PAGE_RUN)}}
	tests := []struct {
		name string
		rec  []byte
		want uint16
	}{
		{"empty", nil, 0},
		{"ends inside hdr.type", hdr(0x0102)[:typeOff+1], 0},
		{"ends right after hdr.type", hdr(0x0102)[:typeOff+2], 0x0102},
		{"a page run without bitmap words", Bytes(&run)[:eventSizes[wire.EventTypeEV_PAGE_RUN]], uint16(wire.EventTypeEV_PAGE_RUN)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := RecordType(tc.rec); got != tc.want {
				t.Errorf("RecordType = %#x, want %#x", got, tc.want)
			}
		})
	}
}
