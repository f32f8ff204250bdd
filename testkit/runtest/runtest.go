// Package runtest writes the read side's runs of known events: a run
// directory as the recorder leaves it (meta.json and a spool of the
// records bpf/iocorr.h defines), ingested through the real pipeline, with
// no tracer. It links neither the recorder nor the BPF loader, so the
// tests that read such a run build wherever the read side does.
package runtest

import (
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// TinyRun writes and ingests a run of a model with two dense tensors
// (layers 0 and 1) and an expert tensor of 4 experts (layer 1). Each of
// tokens 1 (prefill) to 3 has: a major fault on blk.0.ffn_down, a minor
// one on blk.1.ffn_down, a major one on expert <token> of the experts, a
// page added for each, a 4 KiB block read of blk.0.ffn_down and an
// eviction of a page of blk.1.ffn_down. Token 3 also has a minor fault
// on anonymous memory. Every figure of it is known by construction: it is
// the read side's oracle run, with no tracer.
func TinyRun(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	meta := &rundir.Meta{Complete: true, Finished: true, Lost: map[string]uint64{}, OpNames: []string{"NONE", "GET_ROWS", "MUL_MAT", "MUL_MAT_ID"},
		Probes: []rundir.Probe{{Kind: "uprobe", Target: "libggml-cpu.so", Symbol: ggml.SymGetRows},
			{Kind: "tracepoint", Target: rundir.TracepointPageAdd}, {Kind: "tracepoint", Target: rundir.TracepointSysEnterRead}},
		Models: []rundir.ModelFile{{
			Path: "m.gguf", Dev: 5, Ino: 9, Size: 7 * 4096,
			Tensors: []rundir.Tensor{
				{Name: "blk.0.ffn_down.weight", Offset: 4096, Size: 4096, Layer: 0, Role: "ffn_down"},
				{Name: "blk.1.ffn_down.weight", Offset: 8192, Size: 4096, Layer: 1, Role: "ffn_down"},
				{Name: "blk.1.ffn_down_exps.weight", Offset: 12288, Size: 4 * 4096, Layer: 1, Role: "ffn_down_exps", Experts: 4, ExpertStride: 4096},
			},
			Block:   rundir.BlockDevice{Dev: 5, DiskDev: 8 << 20},
			Extents: []rundir.Extent{{Logical: 0, Physical: 1 << 20, Length: 7 * 4096}},
		}}}
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	sp, err := ingest.CreateSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		t.Fatal(err)
	}
	write := func(b []byte) {
		if err := sp.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, node := range []struct {
		name string
		op   uint32
	}{{"blk.1.ffn_down_exps.weight", 3}, {"blk.0.ffn_down.weight", 2}, {"blk.1.ffn_down.weight", 2}} {
		n := wire.NodeEvent{Hdr: wire.EventHdr{Ts: 1, Type: uint16(wire.EventTypeEV_NODE)}, Dev: 5, Ino: 9, Op: node.op}
		for i, c := range node.name {
			n.WeightName[i] = int8(c)
		}
		write(ingest.Bytes(&n))
	}
	ts := uint64(100)
	for tok := uint32(1); tok <= 3; tok++ {
		phase, nTok := uint8(2), int32(1)
		if tok == 1 {
			phase, nTok = 1, 4
		}
		h := func(typ wire.EventType, tid uint32) wire.EventHdr {
			ts += 100
			return wire.EventHdr{Ts: ts, Tid: tid, Tgid: 1, Token: tok, Phase: phase, Type: uint16(typ)}
		}
		write(ingest.Bytes(&wire.DecodeEvent{Hdr: h(wire.EventTypeEV_DECODE_BEGIN, 1), BeginTs: ts, N_tokens: nTok}))
		for _, f := range []struct {
			off   uint64
			class uint8
		}{{4096, 1}, {8192, 0}, {12288 + uint64(tok)*4096, 1}} {
			fh := h(wire.EventTypeEV_FAULT, 1)
			write(ingest.Bytes(&wire.FaultEvent{Hdr: fh, StartTs: fh.Ts - 10, Dev: 5, Ino: 9, FileOff: f.off, Class: f.class}))
			write(ingest.Bytes(&wire.PageEvent{Hdr: h(wire.EventTypeEV_PAGE_ADD, 2), Dev: 5, Ino: 9, Index: f.off / 4096}))
		}
		if tok == 3 {
			fh := h(wire.EventTypeEV_FAULT, 1)
			write(ingest.Bytes(&wire.FaultEvent{Hdr: fh, StartTs: fh.Ts - 10, Addr: 0x1000}))
		}
		bh := h(wire.EventTypeEV_BLOCK, 0)
		write(ingest.Bytes(&wire.BlockEvent{Hdr: bh, IssueTs: bh.Ts - 50, Sector: (1<<20 + 4096) / 512, Dev: 8 << 20, Bytes: 4096}))
		write(ingest.Bytes(&wire.PageEvent{Hdr: h(wire.EventTypeEV_PAGE_DEL, 3), Dev: 5, Ino: 9, Index: 2}))
		write(ingest.Bytes(&wire.DecodeEvent{Hdr: h(wire.EventTypeEV_DECODE_END, 1), BeginTs: ts - 900, N_tokens: nTok}))
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Ingest(t.Context(), dir, pipeline.Options{}); err != nil {
		t.Fatal(err)
	}
	return dir
}
