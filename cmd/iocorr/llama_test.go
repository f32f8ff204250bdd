package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/llmtest"
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

// llamaOffsets returns every tensor llama.cpp's reader finds, by name.
func llamaOffsets(t *testing.T, tool, model string) map[string]llamaTensor {
	t.Helper()
	var errb strings.Builder
	cmd := exec.Command(tool, filepath.Join(llmtest.LibDir(), "libggml-base.so"), model)
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

// TestSynthModelsRunInLlamaCppWhereInspectSaysTheTensorsAre is the proof
// that `iocorr synth` makes models real llama.cpp loads and runs, and that
// `iocorr inspect` puts every tensor exactly where llama.cpp does.
func TestSynthModelsRunInLlamaCppWhereInspectSaysTheTensorsAre(t *testing.T) {
	llmtest.Require(t)
	tool := buildOffsetsTool(t)
	lib, err := llmtest.LlamaLib()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		flags []string
	}{
		{"dense f16", []string{"--layers", "4", "--embd", "512", "--ff", "1024", "--heads", "8", "--type", "f16"}},
		{"dense q8_0 with gqa", []string{"--layers", "4", "--embd", "512", "--ff", "1024", "--heads", "8", "--kv-heads", "2", "--type", "q8_0"}},
		{"dense f32", []string{"--layers", "2", "--embd", "256", "--ff", "512", "--heads", "4", "--type", "f32"}},
		{"moe f16", []string{"--layers", "4", "--embd", "512", "--ff", "512", "--heads", "8", "--experts", "8", "--experts-used", "2", "--type", "f16"}},
		{"moe q8_0", []string{"--layers", "4", "--embd", "512", "--ff", "512", "--heads", "8", "--experts", "4", "--experts-used", "2", "--type", "q8_0"}},
		{"by size: 64MiB", []string{"--size", "64MiB", "--type", "f16"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := filepath.Join(t.TempDir(), "m.gguf")
			start := time.Now()
			if _, errOut, err := runCmd(t, append([]string{"synth", "-o", model}, tc.flags...)...); err != nil {
				t.Fatalf("synth: %v\n%s", err, errOut)
			}
			synthTime := time.Since(start)
			st, _ := os.Stat(model)

			// Offsets: inspect against llama.cpp's own reader, every tensor.
			out, _, err := runCmd(t, "inspect", "--format", "csv", model)
			if err != nil {
				t.Fatal(err)
			}
			rows, col := readCSV(t, out)
			theirs := llamaOffsets(t, tool, model)
			if len(theirs) != len(rows)-1 {
				t.Fatalf("llama.cpp sees %d tensors, inspect lists %d", len(theirs), len(rows)-1)
			}
			for _, r := range rows[1:] {
				name, typeName := r[col["name"]], r[col["type"]]
				lt, ok := theirs[name]
				if !ok {
					t.Errorf("inspect lists %s, llama.cpp does not", name)
					continue
				}
				if r[col["offset"]] != lt.offset || r[col["bytes"]] != lt.size {
					t.Errorf("%s: inspect says offset %s, %s bytes; llama.cpp %s, %s bytes", name, r[col["offset"]], r[col["bytes"]], lt.offset, lt.size)
				}
				typ, ok := gguf.ParseType(typeName)
				if !ok || typ != lt.typ || !strings.EqualFold(typeName, lt.typeName) {
					t.Errorf("%s: inspect says type %s, llama.cpp %d (%s)", name, typeName, lt.typ, lt.typeName)
				}
			}

			// It loads and generates exactly the tokens asked for.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			res, err := llmtest.Generate(ctx, model, llmtest.Options{Tokens: 8, Threads: 2})
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
			// It ran the installed prebuilt llama.cpp, nothing found elsewhere.
			var llama, cpu bool
			for _, l := range res.Libs {
				if filepath.Dir(l) != llmtest.LibDir() {
					t.Errorf("loaded %s, outside %s", l, llmtest.LibDir())
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

// readCSV parses CSV output and indexes its header.
func readCSV(t *testing.T, out string) ([][]string, map[string]int) {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) == 0 {
		t.Fatalf("bad CSV (%v):\n%s", err, out)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	return rows, col
}
