package ingest

import (
	"testing"

	"github.com/iocorr/iocorr/bpf"
)

func TestDecodeCountsShortAndUnknownRecordsWithoutPanicking(t *testing.T) {
	f := bpf.IocorrFaultEvent{Hdr: bpf.IocorrEventHdr{Type: uint16(bpf.IocorrEventTypeEV_FAULT), Ts: 7}, FileOff: 42}
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
	p := bpf.IocorrPageEvent{Hdr: bpf.IocorrEventHdr{Type: uint16(bpf.IocorrEventTypeEV_PAGE_ADD)}}
	rec := Bytes(&p)
	var st DecodeStats
	if n := testing.AllocsPerRun(100, func() {
		r, _ := Decode(rec, &st)
		_ = r.Page()
	}); n != 0 {
		t.Errorf("%v allocations per decode, want 0", n)
	}
}

func TestDecodeCastsAPageRunAndRefusesOneCutShort(t *testing.T) {
	p := bpf.IocorrPageRunEvent{Hdr: bpf.IocorrEventHdr{Type: uint16(bpf.IocorrEventTypeEV_PAGE_RUN)}, Index: 5, NrPages: 300, Span: 300, FirstTs: 9}
	var st DecodeStats
	r, ok := Decode(Bytes(&p), &st)
	if !ok || r.PageRun() == nil || r.PageRun().NrPages != 300 || r.PageRun().Index != 5 || r.Page() != nil {
		t.Fatalf("a page run decoded as ok %v, run %+v", ok, r.PageRun())
	}
	if _, ok := Decode(Bytes(&p)[:len(Bytes(&p))-1], &st); ok || st.Short != 1 {
		t.Fatalf("a run missing its last byte decoded: ok %v %+v", ok, st)
	}
}
