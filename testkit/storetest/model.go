package storetest

import (
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
)

// SynthModel writes a real GGUF model file at path of shape sh (llama's
// MoE layout: attn_q and ffn_up_exps in every layer, as WriteSynthRun's
// records name them) and type typ, and makes it the model of the
// synthetic run in dir, written by WriteSynthRun: its path, size and
// tensor table as the recorder records them, so that what reads the run's
// model (its architecture, its tensor types) reads a real one. The
// records' file offsets fall in the first SynthMeta(sh).Models[0].Size
// bytes: the file is made at least that large (n_embd grown) so that
// every one lands in a tensor of it.
func SynthModel(tb testing.TB, dir, path string, sh SynthShape, typ gguf.Type) {
	tb.Helper()
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		tb.Fatal(err)
	}
	want := SynthMeta(sh).Models[0].Size
	spec := gguf.SynthSpec{Layers: sh.Layers, Experts: sh.Experts, Type: typ, Vocab: 259, Seed: 1}
	for spec.Embd = 64; ; spec.Embd *= 2 {
		l, err := spec.WithDefaults().Layout()
		if err != nil {
			tb.Fatal(err)
		}
		if l.Size >= want {
			break
		}
	}
	if _, err := gguf.CreateSynth(path, spec.WithDefaults()); err != nil {
		tb.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	m := &meta.Models[0]
	m.Path, m.Size, m.DataOffset, m.Tensors = path, f.Size, f.DataOffset, rundir.TensorsOf(f)
	m.Extents[0].Length = uint64(m.Size)
	if err := rundir.WriteMeta(dir, meta); err != nil {
		tb.Fatal(err)
	}
}

// UseModel makes the model of the synthetic run in from, written by
// SynthModel, the model of the synthetic run in dir, of the same shape:
// two runs of one model file.
func UseModel(tb testing.TB, dir, from string) {
	tb.Helper()
	src, err := rundir.ReadMeta(from)
	if err != nil {
		tb.Fatal(err)
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		tb.Fatal(err)
	}
	meta.Models[0] = src.Models[0]
	if err := rundir.WriteMeta(dir, meta); err != nil {
		tb.Fatal(err)
	}
}
