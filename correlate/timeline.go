// The run's timeline: threads, commands, decode calls, graphs, ops and
// scheduler switches, passed on as marks (bpf/proc.bpf.h, sched.bpf.h,
// llama.bpf.h, ggml.bpf.h).

package correlate

import (
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/wire"
)

// timeline passes the record on as timeline marks, if it is one. Every
// record is seen, whatever the layout check decides of it: the trace draws
// ops and graphs as recorded.
func (c *Correlator) timeline(r ingest.Record) {
	hdr := r.Hdr
	c.lastTs = max(c.lastTs, hdr.Ts)
	if c.marks == nil || r.Type == uint16(wire.EventTypeEV_FAULT_COUNT) {
		// A count comes at the run's end, stamped with its last fault:
		// no instant of the timeline, nor a thread's first sign.
		return
	}
	m := &c.mark
	if r.Type == uint16(wire.EventTypeEV_SCHED) {
		// A scheduler record's header is whoever ran the probe: only its
		// threads are facts.
		s := r.Sched()
		*m = event.Mark{Ts: hdr.Ts, Tid: s.PrevTid, Tgid: s.PrevTgid}
		switch s.Kind {
		case uint32(wire.SchedKindSCHEDEV_SWITCH):
			m.Kind, m.PrevState, m.NextTid, m.NextTgid = event.MarkSwitch, s.PrevState, s.NextTid, s.NextTgid
		case uint32(wire.SchedKindSCHEDEV_WAKEUP):
			m.Kind = event.MarkWakeup
		default:
			return
		}
		c.emitMark(m)
		return
	}
	if hdr.Tgid != 0 && hdr.Tid != 0 && hdr.Tid != c.lastTid {
		if !c.threads[hdr.Tid] {
			c.threads[hdr.Tid] = true
			*m = event.Mark{Ts: hdr.Ts, Kind: event.MarkThread, Tid: hdr.Tid, Tgid: hdr.Tgid}
			c.emitMark(m)
		}
		c.lastTid = hdr.Tid
	}
	switch r.Type {
	case uint16(wire.EventTypeEV_TASK), uint16(wire.EventTypeEV_DECODE_BEGIN), uint16(wire.EventTypeEV_DECODE_END),
		uint16(wire.EventTypeEV_GRAPH), uint16(wire.EventTypeEV_OP), uint16(wire.EventTypeEV_GRAPH_END):
	default:
		return // I/O, attributed as events
	}
	*m = event.Mark{Ts: hdr.Ts, Tid: hdr.Tid, Tgid: hdr.Tgid, Token: hdr.Token, Phase: hdr.Phase}
	switch r.Type {
	case uint16(wire.EventTypeEV_TASK):
		t := r.Task()
		if t.Kind != uint32(wire.TaskKindTASKEV_EXEC) {
			return
		}
		m.Kind, m.Name = event.MarkExec, wire.CString(t.Comm[:])
	case uint16(wire.EventTypeEV_DECODE_BEGIN), uint16(wire.EventTypeEV_DECODE_END):
		d := r.Decode()
		m.Kind, m.Begin, m.NTokens, m.Ret = event.MarkDecodeEnd, d.BeginTs, d.N_tokens, d.Ret
		if r.Type == uint16(wire.EventTypeEV_DECODE_BEGIN) {
			m.Kind = event.MarkDecodeBegin
		}
	case uint16(wire.EventTypeEV_GRAPH):
		g := r.Graph()
		m.Kind, m.Seq, m.Nodes, m.WeightNodes = event.MarkGraph, g.Seq, g.N_nodes, g.N_weightNodes
	case uint16(wire.EventTypeEV_OP):
		o := r.Op()
		m.Kind, m.Op, m.Name = event.MarkOp, o.Op, wire.CString(o.Name[:])
	case uint16(wire.EventTypeEV_GRAPH_END):
		g := r.GraphEnd()
		m.Kind, m.Begin, m.Seq = event.MarkGraphEnd, g.BeginTs, g.Seq
	}
	c.emitMark(m)
}

func (c *Correlator) emitMark(m *event.Mark) {
	if c.err != nil {
		return
	}
	if err := c.marks.Mark(m); err != nil {
		c.err = err
	}
}
