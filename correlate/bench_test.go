package correlate

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

type discard struct{ n uint64 }

func (d *discard) Event(*event.Event) error { d.n++; return nil }

// BenchmarkCorrelate measures attribution alone (no spool, no store) over
// a MoE model of 32 layers × 64 experts: faults, folio adds and deletes
// over the whole model, block reads, a few tokens.
func BenchmarkCorrelate(b *testing.B) {
	const layers, experts, expertSize = 32, 64, 1 << 20
	m := rundir.ModelFile{Path: "b.gguf", Dev: modelDev, Ino: modelIno, Block: rundir.BlockDevice{DiskDev: diskDev}}
	off := int64(1 << 20)
	for l := range layers {
		for _, role := range []string{"attn_q", "attn_k", "attn_v", "attn_output"} {
			m.Tensors = append(m.Tensors, rundir.Tensor{Name: role, Offset: off, Size: 4 << 20, Layer: l, Role: role})
			off += 4<<20 + 32
		}
		for _, role := range []string{"ffn_up_exps", "ffn_gate_exps", "ffn_down_exps"} {
			m.Tensors = append(m.Tensors, rundir.Tensor{Name: role, Offset: off, Size: experts * expertSize, Layer: l, Role: role,
				Experts: experts, ExpertStride: expertSize})
			off += experts*expertSize + 32
		}
	}
	m.Extents = []rundir.Extent{{Logical: 0, Physical: 1 << 30, Length: uint64(off)}}
	meta := &rundir.Meta{Models: []rundir.ModelFile{m}}
	const n = 1 << 20
	// One flat buffer, not a million slices the GC would have to scan.
	var buf []byte
	var ends []int
	add := func(b []byte) {
		buf = append(buf, b...)
		ends = append(ends, len(buf))
	}
	for i := range n {
		fo := (uint64(i) * 2654435761 * 4096) % uint64(off) &^ 4095
		h := wire.EventHdr{Ts: uint64(i) * 1000, Tid: uint32(i % 3), Token: uint32(i / (n / 16)), Phase: 2}
		switch i % 4 {
		case 0:
			h.Type = uint16(wire.EventTypeEV_FAULT)
			add(ingest.Bytes(&wire.FaultEvent{Hdr: h, StartTs: h.Ts - 500, Ino: modelIno, Dev: modelDev, FileOff: fo, Class: 1}))
		case 1:
			h.Type = uint16(wire.EventTypeEV_PAGE_ADD)
			add(ingest.Bytes(&wire.PageEvent{Hdr: h, Ino: modelIno, Dev: modelDev, Index: fo / 4096, Order: 2}))
		case 2:
			h.Type = uint16(wire.EventTypeEV_PAGE_DEL)
			add(ingest.Bytes(&wire.PageEvent{Hdr: h, Ino: modelIno, Dev: modelDev, Index: fo / 4096}))
		case 3:
			h.Type = uint16(wire.EventTypeEV_BLOCK)
			add(ingest.Bytes(&wire.BlockEvent{Hdr: h, IssueTs: h.Ts - 300, Sector: (1<<30 + fo) / 512, Dev: diskDev, Bytes: 128 << 10}))
		}
	}
	b.ResetTimer()
	var events uint64
	for b.Loop() {
		sink := &discard{}
		c, err := New(meta, sink)
		if err != nil {
			b.Fatal(err)
		}
		var st ingest.DecodeStats
		start := 0
		for _, end := range ends {
			r, _ := ingest.Decode(buf[start:end], &st)
			start = end
			if err := c.Add(r); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := c.Finish(); err != nil {
			b.Fatal(err)
		}
		events += sink.n
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}
