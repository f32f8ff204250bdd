package gguf_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// buildOffsetsTool compiles testdata/llm/gguf_offsets.c, which asks
// llama.cpp's own GGUF reader (libggml-base.so) where each tensor is.
func buildOffsetsTool(t *testing.T) string {
	t.Helper()
	root, err := llmtest.Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "gguf_offsets")
	out, err := exec.Command("gcc", "-O1", "-Wall", "-o", bin, filepath.Join(root, "testdata", "llm", "gguf_offsets.c"), "-ldl").CombinedOutput()
	if err != nil {
		t.Fatalf("compiling gguf_offsets.c: %v\n%s", err, out)
	}
	return bin
}

// llamaTensor is one tensor as llama.cpp's GGUF reader sees it.
type llamaTensor struct {
	offset, size string // decimal, as inspect's CSV prints them
	typ          gguf.Type
	typeName     string // ggml_type_name's
}

// llamaOffsets returns every tensor llama.cpp's reader (libggml-base.so
// of libDir) finds, by name.
func llamaOffsets(t *testing.T, tool, libDir, model string) map[string]llamaTensor {
	t.Helper()
	var errb strings.Builder
	cmd := exec.Command(tool, filepath.Join(libDir, "libggml-base.so"), model)
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gguf_offsets: %v: %s", err, errb.String())
	}
	m := map[string]llamaTensor{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 5 {
			t.Fatalf("gguf_offsets printed %q, want name, offset, size, type and type name", sc.Text())
		}
		typ, err := strconv.ParseUint(f[3], 10, 32)
		if err != nil {
			t.Fatalf("gguf_offsets: type %q of %s: %v", f[3], f[0], err)
		}
		if _, dup := m[f[0]]; dup {
			t.Fatalf("llama.cpp lists tensor %s twice", f[0])
		}
		m[f[0]] = llamaTensor{offset: f[1], size: f[2], typ: gguf.Type(typ), typeName: f[4]}
	}
	return m
}

// checkOffsets compares every tensor Parse lists with llama.cpp's reader.
func checkOffsets(t *testing.T, f *gguf.File, theirs map[string]llamaTensor) {
	t.Helper()
	if len(theirs) != len(f.Tensors) {
		t.Fatalf("llama.cpp sees %d tensors, Parse lists %d", len(theirs), len(f.Tensors))
	}
	for _, tn := range f.Tensors {
		name, typeName := tn.Name, tn.Type.String()
		offset, size := strconv.FormatInt(tn.FileOffset, 10), strconv.FormatInt(tn.Size, 10)
		lt, ok := theirs[name]
		if !ok {
			t.Errorf("Parse lists %s, llama.cpp does not", name)
			continue
		}
		if offset != lt.offset || size != lt.size {
			t.Errorf("%s: Parse says offset %s, %s bytes; llama.cpp %s, %s bytes", name, offset, size, lt.offset, lt.size)
		}
		typ, ok := gguf.ParseType(typeName)
		if !ok || typ != lt.typ || !strings.EqualFold(typeName, lt.typeName) {
			t.Errorf("%s: Parse says type %s, llama.cpp %d (%s)", name, typeName, lt.typ, lt.typeName)
		}
	}
}

// TestQuantizedModelsHaveTheirTensorsWhereLlamaCppSays quantizes a synth
// model of each architecture with llama.cpp's own llama-quantize to the
// types studies use, and checks each file against llama.cpp's reader of
// that build: every tensor's offset, size and type, and the expert
// tensors' types and slices (expert e of an *_exps tensor, weight or
// bias, is its e-th slice along the last dimension, of ggml's row size
// times the dimensions between).
func TestQuantizedModelsHaveTheirTensorsWhereLlamaCppSays(t *testing.T) {
	tool := buildOffsetsTool(t)
	libDir := llmtest.SharedLibDir(t)
	// The expert weights' types each ftype gives (Q4_K_M keeps some
	// ffn_down in Q6_K); the first is the one it must use.
	ftypes := []struct {
		name  string
		types []gguf.Type
	}{
		{"Q4_K_M", []gguf.Type{gguf.TypeQ4_K, gguf.TypeQ6_K}},
		{"Q6_K", []gguf.Type{gguf.TypeQ6_K}},
		{"IQ4_XS", []gguf.Type{gguf.TypeIQ4_XS}},
		{"Q8_0", []gguf.Type{gguf.TypeQ8_0}},
		{"MXFP4_MOE", []gguf.Type{gguf.TypeMXFP4}},
	}
	for _, arch := range gguf.SynthArchs {
		spec := gguf.SynthSpec{Arch: arch, Layers: 2, Embd: 256, FF: 256, Heads: 4, KVHeads: 2, Experts: 4, ExpertsUsed: 2, Type: gguf.TypeBF16}
		src := llmtest.Model(t, spec)
		for _, ft := range ftypes {
			if ft.name == "MXFP4_MOE" && arch != gguf.ArchGPTOSS {
				continue // llama-quantize makes it of any MoE; studies meet it in gpt-oss
			}
			t.Run(arch+"/"+ft.name, func(t *testing.T) {
				model := llmtest.Quantized(t, src, ft.name)
				f, err := gguf.Open(model)
				if err != nil {
					t.Fatal(err)
				}
				checkOffsets(t, f, llamaOffsets(t, tool, libDir, model))
				used := map[gguf.Type]bool{}
				for _, tn := range f.Tensors {
					if !strings.HasSuffix(tn.Role, "_exps") {
						if tn.Experts != 0 {
							t.Errorf("%s split into %d experts", tn.Name, tn.Experts)
						}
						continue
					}
					last := len(tn.Dims) - 1
					row, err := tn.Type.RowSize(tn.Dims[0])
					if err != nil {
						t.Fatal(err)
					}
					for _, d := range tn.Dims[1:last] {
						row *= d
					}
					if tn.Experts != int(tn.Dims[last]) || tn.ExpertSize != row || tn.ExpertSize*int64(tn.Experts) != tn.Size {
						t.Errorf("%s %s %s: %d experts of %d bytes, want %d of %d", tn.Name, tn.Type, tn.Shape(), tn.Experts, tn.ExpertSize, tn.Dims[last], row)
					}
					if strings.HasSuffix(tn.Name, ".weight") {
						used[tn.Type] = true
					} else if tn.Type != gguf.TypeF32 {
						t.Errorf("%s quantized to %s", tn.Name, tn.Type)
					}
				}
				if !used[ft.types[0]] {
					t.Errorf("no expert weight of %s in a %s model: %v", ft.types[0], ft.name, used)
				}
				for typ := range used {
					if !slices.Contains(ft.types, typ) {
						t.Errorf("an expert weight of %s in a %s model", typ, ft.name)
					}
				}
			})
		}
	}
}

// TestSynthModelsRunInLlamaCppWithTheirTensorsWhereParseSays is the proof
// that synth makes models real llama.cpp loads and runs, and that Parse
// (what `iocorr inspect` lists) puts every tensor exactly where llama.cpp
// does. The specs are what `iocorr synth` makes of its flags.
func TestSynthModelsRunInLlamaCppWithTheirTensorsWhereParseSays(t *testing.T) {
	llmtest.Require(t)
	tool := buildOffsetsTool(t)
	lib, err := llmtest.LlamaLib()
	if err != nil {
		t.Fatal(err)
	}
	if lib, err = filepath.EvalSymlinks(lib); err != nil {
		t.Fatal(err)
	}
	libDir := filepath.Dir(lib)
	// What `iocorr synth` gives for the flags it always passes on.
	flagged := func(s gguf.SynthSpec) gguf.SynthSpec {
		s.Name, s.Vocab, s.Ctx, s.Seed = "iocorr-synth", 512, 2048, 1
		return s
	}
	sized, err := gguf.SizeSynth(64<<20, flagged(gguf.SynthSpec{Type: gguf.TypeF16}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		spec gguf.SynthSpec
	}{
		{"dense f16", flagged(gguf.SynthSpec{Layers: 4, Embd: 512, FF: 1024, Heads: 8, Type: gguf.TypeF16})},
		{"dense q8_0 with gqa", flagged(gguf.SynthSpec{Layers: 4, Embd: 512, FF: 1024, Heads: 8, KVHeads: 2, Type: gguf.TypeQ8_0})},
		{"dense f32", flagged(gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4, Type: gguf.TypeF32})},
		{"moe f16", flagged(gguf.SynthSpec{Layers: 4, Embd: 512, FF: 512, Heads: 8, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeF16})},
		{"moe q8_0", flagged(gguf.SynthSpec{Layers: 4, Embd: 512, FF: 512, Heads: 8, Experts: 4, ExpertsUsed: 2, Type: gguf.TypeQ8_0})},
		{"by size: 64MiB", sized},
		{"qwen3moe bf16", flagged(gguf.SynthSpec{Arch: gguf.ArchQwen3MoE, Layers: 2, Embd: 256, FF: 256, Heads: 4, KVHeads: 2, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeBF16})},
		{"qwen2moe bf16", flagged(gguf.SynthSpec{Arch: gguf.ArchQwen2MoE, Layers: 2, Embd: 256, FF: 256, Heads: 4, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeBF16})},
		{"gpt-oss bf16", flagged(gguf.SynthSpec{Arch: gguf.ArchGPTOSS, Layers: 2, Embd: 256, FF: 256, Heads: 4, KVHeads: 2, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeBF16})},
		{"gpt-oss q8_0", flagged(gguf.SynthSpec{Arch: gguf.ArchGPTOSS, Layers: 2, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: gguf.TypeQ8_0})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := filepath.Join(t.TempDir(), "m.gguf")
			start := time.Now()
			if _, err := gguf.CreateSynth(model, tc.spec); err != nil {
				t.Fatalf("synth: %v", err)
			}
			synthTime := time.Since(start)
			st, _ := os.Stat(model)

			// Offsets: Parse against llama.cpp's own reader, every tensor.
			f, err := gguf.Open(model)
			if err != nil {
				t.Fatal(err)
			}
			checkOffsets(t, f, llamaOffsets(t, tool, llmtest.LibDir(), model))

			// It loads and generates exactly the tokens asked for.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := llmtest.Generate(ctx, model, llmtest.Generation{Tokens: 8, Threads: 2})
			if err != nil {
				t.Fatal(err)
			}
			if res.Generated != 8 {
				t.Fatalf("generated %d tokens, want 8", res.Generated)
			}
			// One llama_decode per prompt batch, then one per token but the last.
			if want := res.PromptBatches + 7; res.DecodeCallsExpected != want {
				t.Errorf("driver expects %d llama_decode calls, want %d", res.DecodeCallsExpected, want)
			}
			// It ran the installed prebuilt llama.cpp, nothing found elsewhere
			// (a checkout may reach node_modules through a symlink).
			var llama, cpu bool
			for _, l := range res.Libs {
				if filepath.Dir(l) != libDir {
					t.Errorf("loaded %s, outside %s", l, libDir)
				}
				llama = llama || l == lib
				cpu = cpu || strings.HasPrefix(filepath.Base(l), "libggml-cpu")
			}
			if !llama || !cpu {
				t.Errorf("libllama and a libggml-cpu variant not both loaded: %v", res.Libs)
			}
			t.Logf("%s: %.1f MiB written in %v; llama.cpp loaded it in %.0f ms, prompt %d tokens in %.0f ms, %.1f tok/s decode",
				tc.name, float64(st.Size())/(1<<20), synthTime.Round(time.Millisecond), res.LoadMS, res.PromptTokens, res.PromptMS, res.TokensPerS)
		})
	}
}
