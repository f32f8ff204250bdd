package correlate

import (
	"reflect"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// marking is a sink that keeps the timeline too.
type marking struct {
	collect
	marks []event.Mark
}

func (m *marking) Mark(k *event.Mark) error { m.marks = append(m.marks, *k); return nil }

func cstr(dst []int8, s string) {
	for i := range len(s) {
		dst[i] = int8(s[i])
	}
}

// What the trace draws besides I/O reaches a sink that keeps the timeline,
// in spool order: each thread's process once, the command a process
// exec'd, decode calls, graphs and ops (whatever the layout check says of
// them), and the scheduler's threads, not the header of whoever ran its
// probe; the last mark is the run's latest record.
func TestTheTimelineIsMarkedInSpoolOrder(t *testing.T) {
	exec := wire.TaskEvent{Hdr: hdr(wire.EventTypeEV_TASK, 5, 9, 0), Kind: uint32(wire.TaskKindTASKEV_EXEC)}
	cstr(exec.Comm[:], "llama-cli")
	op := wire.OpEvent{Hdr: hdr(wire.EventTypeEV_OP, 40, 9, 1), Op: 26}
	cstr(op.Name[:], "ffn_up-0")
	sched := wire.SchedEvent{Hdr: wire.EventHdr{Ts: 60, Tgid: 77, Tid: 78, Type: uint16(wire.EventTypeEV_SCHED)},
		Kind: uint32(wire.SchedKindSCHEDEV_SWITCH), PrevState: 2, PrevTid: 9, PrevTgid: 1, NextTid: 12, NextTgid: 1}
	wake := sched
	wake.Hdr.Ts, wake.Kind = 70, uint32(wire.SchedKindSCHEDEV_WAKEUP)
	recs := [][]byte{
		ingest.Bytes(&exec),
		ingest.Bytes(&wire.DecodeEvent{Hdr: hdr(wire.EventTypeEV_DECODE_BEGIN, 10, 9, 1), BeginTs: 10, N_tokens: 4}),
		ingest.Bytes(&wire.GraphEvent{Hdr: hdr(wire.EventTypeEV_GRAPH, 20, 9, 1), Seq: 3, N_nodes: 100, N_weightNodes: 40}),
		fault(30, 25, 9, modelIno, 0, 1),
		ingest.Bytes(&op),
		fault(45, 44, 11, modelIno, 4096, 0),
		ingest.Bytes(&sched),
		ingest.Bytes(&wake),
		ingest.Bytes(&wire.DecodeEvent{Hdr: hdr(wire.EventTypeEV_DECODE_END, 50, 9, 1), BeginTs: 10, N_tokens: 4, Ret: -1}),
	}
	want := []event.Mark{
		{Ts: 5, Kind: event.MarkThread, Tid: 9, Tgid: 1},
		{Ts: 5, Kind: event.MarkExec, Tid: 9, Tgid: 1, Phase: 2, Name: "llama-cli"},
		{Ts: 10, Kind: event.MarkDecodeBegin, Tid: 9, Tgid: 1, Token: 1, Phase: 2, Begin: 10, NTokens: 4},
		{Ts: 20, Kind: event.MarkGraph, Tid: 9, Tgid: 1, Token: 1, Phase: 2, Seq: 3, Nodes: 100, WeightNodes: 40},
		{Ts: 40, Kind: event.MarkOp, Tid: 9, Tgid: 1, Token: 1, Phase: 2, Op: 26, Name: "ffn_up-0"},
		{Ts: 45, Kind: event.MarkThread, Tid: 11, Tgid: 1},
		{Ts: 60, Kind: event.MarkSwitch, Tid: 9, Tgid: 1, PrevState: 2, NextTid: 12, NextTgid: 1},
		{Ts: 70, Kind: event.MarkWakeup, Tid: 9, Tgid: 1},
		{Ts: 50, Kind: event.MarkDecodeEnd, Tid: 9, Tgid: 1, Token: 1, Phase: 2, Begin: 10, NTokens: 4, Ret: -1},
		{Ts: 70, Kind: event.MarkEnd},
	}
	meta := testMeta()
	meta.Layout = &rundir.Layout{Invalid: "node name offset reads no name"}
	sink := &marking{}
	c, err := New(meta, sink)
	if err != nil {
		t.Fatal(err)
	}
	feed(t, c, &sink.collect, recs...)
	if !reflect.DeepEqual(sink.marks, want) {
		t.Errorf("marks\n%+v\nwant\n%+v", sink.marks, want)
	}
}
