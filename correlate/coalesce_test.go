package correlate

import (
	"slices"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/wire"
)

func pageRun(kind wire.EventType, first, last uint64, tid uint32, index, n uint64) []byte {
	return ingest.Bytes(&wire.PageRunEvent{Hdr: hdr(wire.EventTypeEV_PAGE_RUN, last, tid, 1), Ino: modelIno,
		Dev: modelDev, Index: index, NrPages: uint32(n), Span: uint32(n), FirstTs: first, Kind: uint16(kind), NrFolios: uint32(n)})
}

func TestARunIsChargedAsItsFoliosAre(t *testing.T) {
	// Pages 0..7 of straddleMeta: header, a, b, c's two experts.
	folios, _ := runMeta(t, straddleMeta(),
		page(wire.EventTypeEV_PAGE_ADD, 10, 9, modelIno, 0, 1),
		page(wire.EventTypeEV_PAGE_ADD, 11, 9, modelIno, 2, 0),
		page(wire.EventTypeEV_PAGE_ADD, 12, 9, modelIno, 3, 2),
		page(wire.EventTypeEV_PAGE_ADD, 13, 9, modelIno, 7, 0),
		page(wire.EventTypeEV_PAGE_DEL, 20, 9, modelIno, 1, 0),
		page(wire.EventTypeEV_PAGE_DEL, 21, 9, modelIno, 2, 2),
	)
	runs, _ := runMeta(t, straddleMeta(),
		pageRun(wire.EventTypeEV_PAGE_ADD, 10, 13, 9, 0, 8),
		pageRun(wire.EventTypeEV_PAGE_DEL, 20, 21, 9, 1, 5),
	)
	if !slices.Equal(folios.Aggs, runs.Aggs) || !slices.Equal(folios.Tokens, runs.Tokens) {
		t.Errorf("runs charged\n%+v\n%+v\nfolios charged\n%+v\n%+v", runs.Aggs, runs.Tokens, folios.Aggs, folios.Tokens)
	}
}

func TestARunWithHolesIsChargedAsItsFoliosAre(t *testing.T) {
	folios, _ := runMeta(t, straddleMeta(),
		page(wire.EventTypeEV_PAGE_ADD, 10, 9, modelIno, 0, 0),
		page(wire.EventTypeEV_PAGE_ADD, 11, 9, modelIno, 2, 0),
		page(wire.EventTypeEV_PAGE_ADD, 12, 9, modelIno, 4, 1),
		page(wire.EventTypeEV_PAGE_ADD, 13, 9, modelIno, 7, 0),
	)
	holey := wire.PageRunEvent{Hdr: hdr(wire.EventTypeEV_PAGE_RUN, 13, 9, 1), Ino: modelIno, Dev: modelDev,
		Index: 0, NrPages: 5, Span: 8, FirstTs: 10, Kind: uint16(wire.EventTypeEV_PAGE_ADD), NrFolios: 4}
	holey.Pages[0] = 1<<0 | 1<<2 | 1<<4 | 1<<5 | 1<<7
	runs, _ := runMeta(t, straddleMeta(), ingest.Bytes(&holey))
	if !slices.Equal(folios.Aggs, runs.Aggs) || !slices.Equal(folios.Tokens, runs.Tokens) {
		t.Errorf("runs charged\n%+v\n%+v\nfolios charged\n%+v\n%+v", runs.Aggs, runs.Tokens, folios.Aggs, folios.Tokens)
	}
}

func TestARunIsReadAheadByAFaultOnlyWhenItLiesInTheFaultWholly(t *testing.T) {
	tests := []struct {
		name        string
		first, last uint64
		trigger     bool
	}{
		{"inside", 120, 180, true},
		{"the fault's own bounds", 100, 200, true},
		{"begun before the fault", 90, 180, false},
		{"ended after the fault", 120, 210, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, evs := run(t, pageRun(wire.EventTypeEV_PAGE_ADD, tc.first, tc.last, 7, 3, 2),
				fault(200, 100, 7, modelIno, 4096, 1))
			want, trig := uint64(0), event.NoTensor
			if tc.trigger {
				want, trig = 8192, idQ
			}
			if got := aggOf(res, idQ, -1).TriggerBytes; got != want {
				t.Errorf("trigger bytes %d, want %d", got, want)
			}
			for _, e := range evs {
				if e.Kind == event.KindPageAdd && e.Trigger != trig {
					t.Errorf("add %+v: trigger %d, want %d", e, e.Trigger, trig)
				}
			}
		})
	}
}
