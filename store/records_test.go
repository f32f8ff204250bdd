package store_test

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// Records hands a reader each raw record whole, by request id alone: two
// block requests that complete at one time on one thread with one latency
// stay two, and the slices of one stay one, whichever tensors they are in.
func TestRecordsPutEachRequestsSlicesTogetherByRequestID(t *testing.T) {
	tensors := []event.Tensor{{ID: 0, Name: "[other file]", Model: -1, Layer: -1}, {ID: 1, Name: "[anonymous]", Model: -1, Layer: -1},
		{ID: 2, Name: "[model header]", Model: -1, Layer: -1}, {ID: 3, Name: "a", Layer: 0, Size: 1 << 20}, {ID: 4, Name: "b", Layer: 1, Size: 1 << 20}}
	block := func(req uint32, tensor uint32, bytes uint64) event.Event {
		return event.Event{Ts: 100, Dur: 10, Tid: 7, Req: req, Kind: event.KindBlock, Tensor: tensor, Bytes: bytes, Expert: -1, Trigger: event.NoTensor}
	}
	evs := []event.Event{
		{Ts: 50, Req: 1, Kind: event.KindFault, Tensor: 3, Bytes: 4096, Expert: -1, Trigger: event.NoTensor},
		block(2, 3, 4096), block(2, 4, 8192), block(2, 0, 4096),
		block(3, 3, 4096),
		{Ts: 200, Kind: event.KindFault, Tensor: 4, Bytes: 4096, Expert: -1, Trigger: event.NoTensor},
		{Ts: 200, Kind: event.KindFault, Tensor: 4, Bytes: 4096, Expert: -1, Trigger: event.NoTensor},
	}
	st := storetest.Build(t, tensors, 0, evs, nil)

	type rec struct {
		kind  event.Kind
		n     int
		bytes uint64
	}
	var got []rec
	if err := st.Records(store.EventFilter{}, func(r []event.Event) error {
		x := rec{kind: r[0].Kind, n: len(r)}
		for _, e := range r {
			x.bytes += e.Bytes
		}
		got = append(got, x)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := []rec{{event.KindFault, 1, 4096}, {event.KindBlock, 3, 16384}, {event.KindBlock, 1, 4096},
		{event.KindFault, 1, 4096}, {event.KindFault, 1, 4096}}
	if len(got) != len(want) {
		t.Fatalf("records %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("record %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A chunk is sorted by time on its own, so a request whose slices were
// cut over two chunks would come back in two pieces once a held-back page
// add (emitted late, with an earlier time) sorts ahead of the rest: the
// writer ends chunks between records only.
func TestRecordsKeepARequestWholeAcrossAChunkBoundary(t *testing.T) {
	tensors := []event.Tensor{{ID: 0, Name: "[other file]", Model: -1, Layer: -1}, {ID: 1, Name: "[anonymous]", Model: -1, Layer: -1},
		{ID: 2, Name: "[model header]", Model: -1, Layer: -1}, {ID: 3, Name: "a", Layer: 0, Size: 1 << 20}}
	ev := func(ts uint64, req uint32, kind event.Kind) event.Event {
		return event.Event{Ts: ts, Req: req, Kind: kind, Tensor: 3, Bytes: 4096, Expert: -1, Trigger: event.NoTensor}
	}
	evs := []event.Event{
		ev(50, 1, event.KindFault),
		ev(100, 2, event.KindBlock), ev(100, 2, event.KindBlock), ev(100, 2, event.KindBlock),
		ev(60, 3, event.KindPageAdd),
	}
	st := storetest.Build(t, tensors, 3, evs, nil)
	var blocks []int
	if err := st.Records(store.EventFilter{}, func(r []event.Event) error {
		if r[0].Kind == event.KindBlock {
			blocks = append(blocks, len(r))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 1 || blocks[0] != 3 {
		t.Errorf("the block request came back as records of %v slices, want one of 3", blocks)
	}
}
