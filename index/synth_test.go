package index_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
)

const (
	synDev    = 1<<20 | 1
	synIno    = 77
	synDisk   = 8 << 20
	synPart   = 2048
	synLayers = 4
	synExps   = 8
	synTensor = 1 << 20 // bytes per dense tensor
	synExpert = 1 << 18 // bytes per expert
)

// synthShape is the model's shape: layers of attn_q (dense) and
// ffn_up_exps (experts).
type synthShape struct{ layers, experts int }

var smallShape = synthShape{synLayers, synExps}

// synthMeta is an MoE model: per layer attn_q (dense) and ffn_up_exps,
// contiguous on disk in one extent at partition byte 1 GiB.
func synthMeta(sh synthShape) *rundir.Meta {
	m := rundir.ModelFile{Path: "syn.gguf", Dev: synDev, Ino: synIno,
		Block: rundir.BlockDevice{DiskDev: synDisk, PartStartSector: synPart}}
	off := int64(4096)
	synExps := int64(sh.experts)
	for l := range sh.layers {
		m.Tensors = append(m.Tensors, rundir.Tensor{Name: fmt.Sprintf("blk.%d.attn_q.weight", l), Offset: off, Size: synTensor, Layer: l, Role: "attn_q"})
		off += synTensor
		m.Tensors = append(m.Tensors, rundir.Tensor{Name: fmt.Sprintf("blk.%d.ffn_up_exps.weight", l), Offset: off, Size: synExps * synExpert,
			Layer: l, Role: "ffn_up_exps", Experts: int(synExps), ExpertStride: synExpert})
		off += synExps * synExpert
	}
	m.Size = off
	m.Extents = []rundir.Extent{{Logical: 0, Physical: 1 << 30, Length: uint64(off)}}
	return &rundir.Meta{OpNames: []string{"NONE", "MUL_MAT", "MUL_MAT_ID"}, Models: []rundir.ModelFile{m},
		Lost: map[string]uint64{}, Counts: map[string]uint64{}}
}

// synthTotals is what writeSynthRun put in the spool, for checks.
type synthTotals struct {
	faults, major, readBytes, added, evicted uint64
}

// writeSynthRun writes a run directory with n events over tokens tokens:
// per step a fault, a page add, a page delete, and every 8th step a
// block read, cycling over tensors and experts.
func writeSynthRun(tb testing.TB, dir string, n, tokens int) synthTotals {
	tb.Helper()
	return writeSynthRunShape(tb, dir, n, tokens, smallShape)
}

func writeSynthRunShape(tb testing.TB, dir string, n, tokens int, sh synthShape) synthTotals {
	tb.Helper()
	meta := synthMeta(sh)
	if err := rundir.WriteMeta(dir, meta); err != nil {
		tb.Fatal(err)
	}
	sp, err := ingest.CreateSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		tb.Fatal(err)
	}
	var tot synthTotals
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
	for l := range sh.layers {
		for _, w := range []struct {
			name string
			op   uint32
		}{{fmt.Sprintf("blk.%d.attn_q.weight", l), 1}, {fmt.Sprintf("blk.%d.ffn_up_exps.weight", l), 2}} {
			if i >= n/2 {
				break
			}
			nd := bpf.IocorrNodeEvent{Hdr: bpf.IocorrEventHdr{Ts: ts, Type: uint16(bpf.IocorrEventTypeEV_NODE)}, Dev: synDev, Ino: synIno, Op: w.op}
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
			d := bpf.IocorrDecodeEvent{Hdr: bpf.IocorrEventHdr{Ts: ts, Token: tok, Type: uint16(bpf.IocorrEventTypeEV_DECODE_BEGIN), Phase: 2}, BeginTs: ts, N_tokens: 1}
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
		h := bpf.IocorrEventHdr{Ts: ts, Tid: 10, Tgid: 10, Token: tok, Phase: phase}
		off := (uint64(i) * 40961) % size &^ 4095
		switch i % 3 {
		case 0:
			h.Type = uint16(bpf.IocorrEventTypeEV_FAULT)
			f := bpf.IocorrFaultEvent{Hdr: h, StartTs: ts - 500, Ino: synIno, Dev: synDev, FileOff: off, Class: uint8(i % 2)}
			write(ingest.Bytes(&f))
			tot.faults++
			tot.major += uint64(i % 2)
		case 1:
			h.Type = uint16(bpf.IocorrEventTypeEV_PAGE_ADD)
			p := bpf.IocorrPageEvent{Hdr: h, Ino: synIno, Dev: synDev, Index: off / 4096}
			write(ingest.Bytes(&p))
			tot.added += 4096
		case 2:
			if i%8 == 2 {
				h.Type = uint16(bpf.IocorrEventTypeEV_BLOCK)
				b := bpf.IocorrBlockEvent{Hdr: h, IssueTs: ts - 300, Sector: (synPart*512 + 1<<30 + off) / 512, Dev: synDisk, Bytes: 8192}
				if off+8192 > size {
					b.Bytes = 4096
				}
				write(ingest.Bytes(&b))
				tot.readBytes += uint64(b.Bytes)
			} else {
				h.Type = uint16(bpf.IocorrEventTypeEV_PAGE_DEL)
				p := bpf.IocorrPageEvent{Hdr: h, Ino: synIno, Dev: synDev, Index: off / 4096}
				write(ingest.Bytes(&p))
				tot.evicted += 4096
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
