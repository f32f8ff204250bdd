package gguf_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// buildQuantCheck compiles testdata/quantcheck against the shared
// llama.cpp build (skipping or failing as llmtest does when it is
// missing).
func buildQuantCheck(t *testing.T) string {
	t.Helper()
	lib := llmtest.SharedLibDir(t)
	inc := filepath.Join(filepath.Dir(lib), "include")
	bin := filepath.Join(t.TempDir(), "quantcheck")
	out, err := exec.Command("cc", "-O1", "-Wall", "-o", bin, filepath.Join("testdata", "quantcheck", "quantcheck.c"),
		"-I"+inc, "-L"+lib, "-lllama", "-lggml-base", "-lm", "-Wl,-rpath,"+lib).CombinedOutput()
	if err != nil {
		t.Fatalf("building quantcheck: %v\n%s", err, out)
	}
	return bin
}

// quantSpec is a small model whose every weight, expert or not, is of
// typ (MXFP4: the experts; the rest Q8_0), with a head size that is not
// n_embd/n_head, as in Qwen3-30B-A3B.
func quantSpec(typ gguf.Type, skew float64) gguf.SynthSpec {
	arch := gguf.ArchQwen3MoE
	if typ == gguf.TypeMXFP4 {
		arch = gguf.ArchGPTOSS
	}
	return gguf.SynthSpec{Arch: arch, Layers: 2, Embd: 256, FF: 256, Heads: 4, KVHeads: 2, HeadDim: 128,
		Experts: 8, ExpertsUsed: 2, Vocab: 512, Type: typ, RouterSkew: skew, Seed: 5}
}

var quantTypes = []gguf.Type{gguf.TypeQ8_0, gguf.TypeQ4_K, gguf.TypeQ6_K, gguf.TypeMXFP4}

// TestSynthBlocksAreWhatGgmlDecodes writes each quantized type's model,
// skewed (so embedding rows carry a set element) and not, and decodes
// its expert and embedding tensors both with ggml's own to_float and
// with Dequantize: the two agree bit for bit, and every weight is
// finite, below 0.03, and of both signs about equally.
func TestSynthBlocksAreWhatGgmlDecodes(t *testing.T) {
	qc := buildQuantCheck(t)
	for _, typ := range quantTypes {
		for _, skew := range []float64{0, 1} {
			t.Run(fmt.Sprintf("%s skew %g", typ, skew), func(t *testing.T) {
				spec := quantSpec(typ, skew)
				var b bytes.Buffer
				if _, err := gguf.WriteSynth(&b, spec); err != nil {
					t.Fatal(err)
				}
				raw := b.Bytes()
				f, err := gguf.Parse(bytes.NewReader(raw), int64(len(raw)))
				if err != nil {
					t.Fatal(err)
				}
				for _, name := range []string{"blk.1.ffn_up_exps.weight", "token_embd.weight", "blk.0.attn_q.weight"} {
					tn := f.Tensor(name)
					data := raw[tn.FileOffset:tn.End()]
					mine, err := gguf.Dequantize(tn.Type, data)
					if err != nil {
						t.Fatal(err)
					}
					cmd := exec.Command(qc, "dequant", strconv.Itoa(int(tn.Type)))
					cmd.Stdin = bytes.NewReader(data)
					out, err := cmd.Output()
					if err != nil {
						t.Fatalf("quantcheck dequant %s: %v", tn.Type, err)
					}
					if len(out) != 4*len(mine) {
						t.Fatalf("%s: ggml decoded %d values, Dequantize %d", name, len(out)/4, len(mine))
					}
					var neg int
					for i, v := range mine {
						g := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:]))
						if math.Float32bits(g) != math.Float32bits(v) {
							t.Fatalf("%s %s value %d: ggml %v, Dequantize %v", name, tn.Type, i, g, v)
						}
						if math.IsNaN(float64(v)) || math.Abs(float64(v)) >= 0.03 {
							t.Fatalf("%s %s value %d: %v", name, tn.Type, i, v)
						}
						if v < 0 {
							neg++
						}
					}
					if neg < len(mine)*4/10 || neg > len(mine)*6/10 {
						t.Errorf("%s %s: %d of %d values negative", name, tn.Type, neg, len(mine))
					}
				}
			})
		}
	}
}

// TestSynthQuantizedModelsRunInLlamaCpp loads each quantized type's
// model in real llama.cpp, where every tensor is where Parse says, and
// decodes with it: every logit of every call is finite.
func TestSynthQuantizedModelsRunInLlamaCpp(t *testing.T) {
	qc := buildQuantCheck(t)
	tool := buildOffsetsTool(t)
	libDir := llmtest.SharedLibDir(t)
	for _, c := range []struct {
		typ  gguf.Type
		skew float64
	}{{gguf.TypeQ8_0, 0}, {gguf.TypeQ4_K, 0}, {gguf.TypeQ4_K, 1}, {gguf.TypeQ6_K, 0}, {gguf.TypeMXFP4, 0}, {gguf.TypeMXFP4, 1}} {
		typ := c.typ
		t.Run(fmt.Sprintf("%s skew %g", typ, c.skew), func(t *testing.T) {
			model := llmtest.Model(t, quantSpec(typ, c.skew))
			f, err := gguf.Open(model)
			if err != nil {
				t.Fatal(err)
			}
			checkOffsets(t, f, llamaOffsets(t, tool, libDir, model))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var stderr strings.Builder
			cmd := exec.CommandContext(ctx, qc, "logits", model, "4")
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("quantcheck logits: %v\n%s%s", err, out, stderr.String())
			}
			var calls, values int
			var lo, hi float64
			if _, err := fmt.Sscanf(string(out), "logits %d %d %g %g", &calls, &values, &lo, &hi); err != nil || calls != 4 {
				t.Fatalf("quantcheck printed %q (%v)", out, err)
			}
			if lo == hi {
				t.Errorf("every logit is %g: the weights compute nothing", lo)
			}
			t.Logf("%s: %d finite logits in [%.3g, %.3g]", typ, values, lo, hi)
		})
	}
}

// TestSynthStreamsInBoundedMemory writes four layers of Qwen3-30B-A3B's
// full shape in Q4_K (1.4 GB, most of it experts) and checks the heap
// never holds more than a few chunks: the size of a model is the disk's
// business, not the writer's.
func TestSynthStreamsInBoundedMemory(t *testing.T) {
	spec, err := gguf.SynthLike("qwen3-30b-a3b")
	if err != nil {
		t.Fatal(err)
	}
	spec.Layers = 4
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapInuse
	w := &peakWriter{}
	n, err := gguf.WriteSynth(w, spec)
	if err != nil {
		t.Fatal(err)
	}
	if peak := w.peak - base; peak > 64<<20 {
		t.Errorf("heap grew by %d MiB writing %d MiB", peak>>20, n>>20)
	}
	t.Logf("wrote %d MiB; heap grew by at most %.1f MiB", n>>20, float64(w.peak-base)/(1<<20))
}

// peakWriter discards what it is given and samples the heap every 64 MiB.
type peakWriter struct {
	n, next int64
	peak    uint64
}

func (p *peakWriter) Write(b []byte) (int, error) {
	p.n += int64(len(b))
	if p.n >= p.next {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p.peak = max(p.peak, ms.HeapInuse)
		p.next = p.n + 64<<20
	}
	return len(b), nil
}

var _ io.Writer = (*peakWriter)(nil)
