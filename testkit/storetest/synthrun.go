package storetest

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// The synthetic run's model and device.
const (
	SynDev     = 1<<20 | 1
	SynIno     = 77
	SynDisk    = 8 << 20
	SynPart    = 2048
	SynLayers  = 4
	SynExperts = 8
	SynTensor  = 1 << 20 // bytes per dense tensor
	SynExpert  = 1 << 18 // bytes per expert
)

// SynthShape is the model's shape: layers of attn_q (dense) and
// ffn_up_exps (experts).
type SynthShape struct{ Layers, Experts int }

// SmallShape is SynLayers layers of SynExperts experts.
var SmallShape = SynthShape{SynLayers, SynExperts}

// SynthMeta is an MoE model: per layer attn_q (dense) and ffn_up_exps,
// contiguous on disk in one extent at partition byte 1 GiB.
func SynthMeta(sh SynthShape) *rundir.Meta {
	m := rundir.ModelFile{Path: "syn.gguf", Dev: SynDev, Ino: SynIno,
		Block: rundir.BlockDevice{DiskDev: SynDisk, PartStartSector: SynPart}}
	off := int64(4096)
	SynExperts := int64(sh.Experts)
	for l := range sh.Layers {
		m.Tensors = append(m.Tensors, rundir.Tensor{Name: fmt.Sprintf("blk.%d.attn_q.weight", l), Offset: off, Size: SynTensor, Layer: l, Role: "attn_q"})
		off += SynTensor
		m.Tensors = append(m.Tensors, rundir.Tensor{Name: fmt.Sprintf("blk.%d.ffn_up_exps.weight", l), Offset: off, Size: SynExperts * SynExpert,
			Layer: l, Role: "ffn_up_exps", Experts: int(SynExperts), ExpertStride: SynExpert})
		off += SynExperts * SynExpert
	}
	m.Size = off
	m.Extents = []rundir.Extent{{Logical: 0, Physical: 1 << 30, Length: uint64(off)}}
	return &rundir.Meta{OpNames: []string{"NONE", "MUL_MAT", "MUL_MAT_ID"}, Models: []rundir.ModelFile{m},
		Lost: map[string]uint64{}, Counts: map[string]uint64{}}
}

// SynthTotals is what WriteSynthRun put in the spool, for checks.
type SynthTotals struct {
	Faults, Major, ReadBytes, Added, Evicted uint64
}

// WriteSynthRun writes a run directory of model sh with n records over
// tokens tokens, as the recorder would: meta.json and a spool of real BPF
// records (the graph nodes naming the weights' ops, then per step a
// fault, a page add, a page delete, and every 8th step a block read,
// cycling over tensors and experts), for `iocorr ingest` to build a store
// of any size in seconds.
func WriteSynthRun(tb testing.TB, dir string, n, tokens int, sh SynthShape) SynthTotals {
	tb.Helper()
	meta := SynthMeta(sh)
	if err := rundir.WriteMeta(dir, meta); err != nil {
		tb.Fatal(err)
	}
	sp, err := ingest.CreateSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		tb.Fatal(err)
	}
	var tot SynthTotals
	size := uint64(meta.Models[0].Size)
	ts := uint64(1000)
	write := func(b []byte) {
		if err := sp.Write(b); err != nil {
			tb.Fatal(err)
		}
	}
	// The graph nodes reading the weights, which name their ops: they
	// count among the n records.
	i := 0
	for l := range sh.Layers {
		for _, w := range []struct {
			name string
			op   uint32
		}{{fmt.Sprintf("blk.%d.attn_q.weight", l), 1}, {fmt.Sprintf("blk.%d.ffn_up_exps.weight", l), 2}} {
			if i >= n/2 {
				break
			}
			nd := wire.NodeEvent{Hdr: wire.EventHdr{Ts: ts, Type: uint16(wire.EventTypeEV_NODE)}, Dev: SynDev, Ino: SynIno, Op: w.op}
			for j, c := range w.name {
				nd.WeightName[j] = int8(c)
			}
			write(ingest.Bytes(&nd))
			i++
		}
	}
	perToken := max((n-i)/tokens, 1)
	tok := uint32(0)
	for first := i; i < n; {
		if (i-first)%perToken == 0 && int(tok) < tokens {
			tok++
			d := wire.DecodeEvent{Hdr: wire.EventHdr{Ts: ts, Token: tok, Type: uint16(wire.EventTypeEV_DECODE_BEGIN), Phase: 2}, BeginTs: ts, N_tokens: 1}
			if tok == 1 {
				d.Hdr.Phase, d.N_tokens = 1, 4
			}
			write(ingest.Bytes(&d))
			i++
			continue
		}
		phase := uint8(2)
		if tok == 1 {
			phase = 1
		}
		h := wire.EventHdr{Ts: ts, Tid: 10, Tgid: 10, Token: tok, Phase: phase}
		off := (uint64(i) * 40961) % size &^ 4095
		switch i % 3 {
		case 0:
			h.Type = uint16(wire.EventTypeEV_FAULT)
			f := wire.FaultEvent{Hdr: h, StartTs: ts - 500, Ino: SynIno, Dev: SynDev, FileOff: off, Class: uint8(i % 2)}
			write(ingest.Bytes(&f))
			tot.Faults++
			tot.Major += uint64(i % 2)
		case 1:
			h.Type = uint16(wire.EventTypeEV_PAGE_ADD)
			p := wire.PageEvent{Hdr: h, Ino: SynIno, Dev: SynDev, Index: off / 4096}
			write(ingest.Bytes(&p))
			tot.Added += 4096
		case 2:
			if i%8 == 2 {
				h.Type = uint16(wire.EventTypeEV_BLOCK)
				b := wire.BlockEvent{Hdr: h, IssueTs: ts - 300, Sector: (SynPart*512 + 1<<30 + off) / 512, Dev: SynDisk, Bytes: 8192}
				if off+8192 > size {
					b.Bytes = 4096
				}
				write(ingest.Bytes(&b))
				tot.ReadBytes += uint64(b.Bytes)
			} else {
				h.Type = uint16(wire.EventTypeEV_PAGE_DEL)
				p := wire.PageEvent{Hdr: h, Ino: SynIno, Dev: SynDev, Index: off / 4096}
				write(ingest.Bytes(&p))
				tot.Evicted += 4096
			}
		}
		ts += 1000
		i++
	}
	if err := sp.Close(); err != nil {
		tb.Fatal(err)
	}
	return tot
}
