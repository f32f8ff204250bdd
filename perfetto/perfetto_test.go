package perfetto

import (
	"bytes"
	"slices"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/perfettotest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

var pseudoTensors = []event.Tensor{
	{ID: event.TensorOther, Name: event.PseudoNames[0], Model: -1, Layer: -1},
	{ID: event.TensorAnon, Name: event.PseudoNames[1], Model: -1, Layer: -1},
	{ID: event.TensorModelMeta, Name: event.PseudoNames[2], Model: -1, Layer: -1},
}

// storeOf builds a store of the given events and timeline marks.
func storeOf(t *testing.T, evs []event.Event, marks []event.Mark) *store.Store {
	return storetest.Build(t, pseudoTensors, 0, evs, marks)
}

// export writes the trace of st and reads it back with the test kit's
// decoder.
func export(t *testing.T, st *store.Store, meta *rundir.Meta) (perfettotest.Trace, Summary) {
	t.Helper()
	var buf bytes.Buffer
	sum, err := Export(&buf, &store.Run{Store: st, Meta: meta}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return perfettotest.Decode(t, buf.Bytes()), sum
}

// A block request is one slice however many tensors its slices are in,
// and two requests are two even when they complete at one time on one
// thread with one latency: the request id tells, not the timing.
func TestBlockRequestsAreOneSliceEachByRequestID(t *testing.T) {
	blk := func(req uint32, off int64, n uint64) event.Event {
		return event.Event{Ts: 1000, Dur: 100, Tid: 7, Req: req, Kind: event.KindBlock, Tensor: event.TensorOther,
			Offset: off, Bytes: n, Expert: -1, Trigger: event.NoTensor}
	}
	st := storeOf(t, []event.Event{blk(1, 0, 4096), blk(1, 4096, 8192), blk(1, 12288, 4096), blk(2, 1<<20, 4096)}, nil)
	b, sum := export(t, st, &rundir.Meta{ProbeSet: "graph"})
	if sum.BlockRequests != 2 {
		t.Errorf("%d block request slices, want 2", sum.BlockRequests)
	}
	// Requests in flight at once go on lanes of their device's track.
	got := append(b.SlicesOn("queue slot 0"), b.SlicesOn("queue slot 1")...)
	slices.Sort(got)
	if want := []string{"read 16 KiB", "read 4 KiB"}; !slices.Equal(got, want) {
		t.Errorf("block slices %q, want %q", got, want)
	}
}

// A request whose completion BPF never saw is drawn where it was learned
// of, and says so in its name: its zero width is no latency.
func TestABlockRequestWithItsCompletionUnseenSaysSo(t *testing.T) {
	evs := []event.Event{
		{Ts: 1000, Dur: 100, Tid: 7, Req: 1, Kind: event.KindBlock, Tensor: event.TensorOther, Bytes: 4096, Expert: -1, Trigger: event.NoTensor},
		{Ts: 2000, Tid: 7, Req: 2, Kind: event.KindBlock, Class: event.ClassRead | event.ClassCompletionUnseen, Tensor: event.TensorOther,
			Offset: 1 << 20, Bytes: 8192, Expert: -1, Trigger: event.NoTensor},
	}
	b, sum := export(t, storeOf(t, evs, nil), &rundir.Meta{ProbeSet: "graph"})
	if sum.BlockRequests != 2 {
		t.Errorf("%d block request slices, want 2", sum.BlockRequests)
	}
	got := b.SlicesOn("queue slot 0")
	if want := []string{"read 4 KiB", "read 8 KiB (completion unseen)"}; !slices.Equal(got, want) {
		t.Errorf("block slices %q, want %q", got, want)
	}
}

// Decode calls, a process's command and its threads' scheduler states
// come from the store's timeline: a call is a slice from its begin to its
// end, a thread switched out in D state is blocked until woken, then
// runnable until switched in.
func TestTheTraceDrawsTheStoresTimeline(t *testing.T) {
	marks := []event.Mark{
		{Ts: 5, Kind: event.MarkThread, Tid: 9, Tgid: 9},
		{Ts: 5, Kind: event.MarkExec, Tid: 9, Tgid: 9, Name: "llama-cli"},
		{Ts: 10, Kind: event.MarkDecodeBegin, Tid: 9, Tgid: 9, Token: 1, Begin: 10, NTokens: 4},
		{Ts: 20, Kind: event.MarkSwitch, Tid: 3, Tgid: 3, NextTid: 9, NextTgid: 9},
		{Ts: 30, Kind: event.MarkSwitch, Tid: 9, Tgid: 9, PrevState: 2, NextTid: 3, NextTgid: 3},
		{Ts: 40, Kind: event.MarkWakeup, Tid: 9, Tgid: 9},
		{Ts: 50, Kind: event.MarkSwitch, Tid: 3, Tgid: 3, NextTid: 9, NextTgid: 9},
		{Ts: 60, Kind: event.MarkDecodeEnd, Tid: 9, Tgid: 9, Token: 1, Phase: event.PhasePrefill, Begin: 10, NTokens: 4},
		{Ts: 70, Kind: event.MarkEnd},
	}
	st := storeOf(t, nil, marks)
	b, sum := export(t, st, &rundir.Meta{ProbeSet: "graph,sched"})
	if got := b.SlicesOn("llama-cli 9"); !slices.Equal(got, []string{"token 1"}) {
		t.Errorf("thread track slices %q, want the decode call", got)
	}
	want := []string{stateRunning, stateBlocked, stateRunnable, stateRunning}
	if got := b.SlicesOn("thread state"); !slices.Equal(got, want) {
		t.Errorf("thread states %q, want %q", got, want)
	}
	if sum.Tokens != 1 || sum.ThreadStates != 4 || sum.BlockedNS != 10 {
		t.Errorf("summary %+v, want 1 token, 4 thread states, 10 ns blocked", sum)
	}
	if len(sum.NotInTrace) != 1 {
		t.Errorf("not in trace %q, want only ops", sum.NotInTrace)
	}
}

// The same store exports the same bytes every time: tracks are numbered
// in an order of their own, not in the order a map hands out threads
// (two exports of one run must diff clean).
func TestTheSameStoreExportsTheSameBytes(t *testing.T) {
	var marks []event.Mark
	for tid := uint32(9); tid < 17; tid++ {
		ts := uint64(tid) * 100
		marks = append(marks,
			event.Mark{Ts: ts, Kind: event.MarkThread, Tid: tid, Tgid: 9},
			event.Mark{Ts: ts + 1, Kind: event.MarkDecodeBegin, Tid: tid, Tgid: 9, Token: tid, Begin: ts + 1, NTokens: 1},
			event.Mark{Ts: ts + 2, Kind: event.MarkGraph, Tid: tid, Tgid: 9, Token: tid},
			event.Mark{Ts: ts + 50, Kind: event.MarkDecodeEnd, Tid: tid, Tgid: 9, Token: tid, Phase: event.PhaseDecode, Begin: ts + 1, NTokens: 1},
		)
	}
	// One call still open at the end.
	marks = append(marks, event.Mark{Ts: 2000, Kind: event.MarkDecodeBegin, Tid: 20, Tgid: 9, Token: 99, Begin: 2000, NTokens: 1},
		event.Mark{Ts: 2001, Kind: event.MarkDecodeBegin, Tid: 21, Tgid: 9, Token: 100, Begin: 2001, NTokens: 1},
		event.Mark{Ts: 3000, Kind: event.MarkEnd})
	st := storeOf(t, nil, marks)
	var first []byte
	for i := range 8 {
		var buf bytes.Buffer
		if _, err := Export(&buf, &store.Run{Store: st, Meta: &rundir.Meta{ProbeSet: "graph"}}, Options{}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = buf.Bytes()
		} else if !bytes.Equal(buf.Bytes(), first) {
			t.Fatalf("export %d differs from the first (%d and %d bytes)", i+1, buf.Len(), len(first))
		}
	}
}
