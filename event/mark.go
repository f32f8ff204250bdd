package event

import "strconv"

// MarkKind is what a timeline mark records.
type MarkKind uint8

const (
	MarkThread      MarkKind = 1 // first record of a thread: Tid belongs to process Tgid
	MarkExec        MarkKind = 2 // process Tgid exec'd command Name
	MarkDecodeBegin MarkKind = 3 // a llama_decode call began: Begin, NTokens
	MarkDecodeEnd   MarkKind = 4 // a llama_decode call returned Ret at Ts: Begin, NTokens
	MarkGraph       MarkKind = 5 // a ggml graph computation began: Seq, Nodes, WeightNodes
	MarkOp          MarkKind = 6 // a ggml op began: Op, its node's Name
	MarkSwitch      MarkKind = 7 // Tid was switched out in PrevState, NextTid switched in (--probe sched)
	MarkWakeup      MarkKind = 8 // Tid was woken (--probe sched)
	MarkEnd         MarkKind = 9 // the run's last record, at Ts
	// MarkGraphEnd: the ggml graph computation Seq of thread Tid, begun at
	// Begin, returned at Ts (with a GPU backend, one CPU split's time).
	MarkGraphEnd MarkKind = 10
)

var markKindNames = [...]string{"", "thread", "exec", "decode_begin", "decode_end", "graph", "op", "switch", "wakeup", "end"}

func (k MarkKind) String() string {
	if int(k) < len(markKindNames) && k > 0 {
		return markKindNames[k]
	}
	return "mark" + strconv.Itoa(int(k))
}

// Mark is one thing a traced thread did besides I/O, as the Perfetto trace
// draws it: its llama_decode calls, ggml graphs and ops, scheduler states,
// and which process and command it belongs to. The correlator writes them
// in spool order to a sink that is also a MarkSink; the fields a kind does
// not name (MarkKind's comments) are zero.
type Mark struct {
	Ts   uint64 // CLOCK_MONOTONIC ns
	Kind MarkKind
	// Tid and Tgid are the record's thread and process; for a switch the
	// thread switched out, for a wakeup the thread woken.
	Tid, Tgid   uint32
	Token       uint32
	Phase       uint8
	Begin       uint64 // decode: when the call began
	NTokens     int32  // decode
	Ret         int32  // decode end
	Seq         uint32 // graph: its sequence number
	Nodes       uint32 // graph
	WeightNodes uint32 // graph: nodes reading a weight
	Op          uint32 // op: ggml op number (rundir.Meta.OpNames)
	PrevState   int64  // switch: the switched-out thread's state bits
	NextTid     uint32 // switch
	NextTgid    uint32 // switch
	Name        string // op: the node's name; exec: the command
}

// MarkSink receives timeline marks. The pointer is valid only during the
// call.
type MarkSink interface {
	Mark(*Mark) error
}
