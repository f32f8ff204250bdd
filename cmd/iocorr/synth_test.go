package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
)

func runCmd(t testing.TB, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	return out.String(), errb.String(), err
}

func TestSynthWritesLoadableModel(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	_, errOut, err := runCmd(t, "synth", "-o", path, "--layers", "2", "--embd", "64", "--ff", "128", "--heads", "4",
		"--kv-heads", "2", "--type", "q8_0", "--vocab", "300", "--seed", "3")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, path) || !strings.Contains(errOut, "MB/s") || !strings.Contains(errOut, "21 tensors") {
		t.Errorf("summary line %q", errOut)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Metadata.Int("llama.attention.head_count_kv"); n != 2 {
		t.Errorf("head_count_kv %d", n)
	}
	if q := f.Tensor("blk.1.attn_k.weight"); q == nil || q.Type != gguf.TypeQ8_0 || q.Shape() != "[64 32]" {
		t.Errorf("attn_k %+v", q)
	}
}

func TestSynthSizePicksShape(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.gguf")
	if _, _, err := runCmd(t, "synth", "-o", path, "--size", "24MiB", "--experts", "4"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if r := float64(st.Size()) / (24 << 20); r < 0.9 || r > 1.1 {
		t.Errorf("size %d, want about 24 MiB", st.Size())
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Metadata.Int("llama.expert_count"); n != 4 {
		t.Errorf("expert_count %d", n)
	}
	// An explicit shape flag is kept.
	if _, _, err := runCmd(t, "synth", "-o", path, "--size", "24MiB", "--layers", "3"); err != nil {
		t.Fatal(err)
	}
	f, _ = gguf.Open(path)
	if n, _ := f.Metadata.Int("llama.block_count"); n != 3 {
		t.Errorf("block_count %d, want the explicit 3", n)
	}
}

func TestSynthRejectsBadFlags(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.gguf")
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"synth"}, "-o MODEL.gguf is required"},
		{[]string{"synth", "-o", out, "--type", "q4_k"}, `--type "q4_k"`},
		{[]string{"synth", "-o", out, "--embd", "100", "--heads", "3"}, "heads 3 must divide embd 100"},
		{[]string{"synth", "-o", out, "--type", "q8_0", "--embd", "48", "--heads", "2"}, "multiple of 32"},
		{[]string{"synth", "-o", out, "--vocab", "10"}, "vocab 10"},
		{[]string{"synth", "-o", out, "--size", "lots"}, "not a size"},
		{[]string{"synth", "-o", out, "--size", "2XB"}, "unknown unit"},
		{[]string{"synth", "-o", out, "--size", "100B"}, "cannot reach"},
		{[]string{"synth", "-o", out, "extra"}, "unexpected arguments"},
	} {
		_, _, err := runCmd(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%v: error %v, want %q", c.args, err, c.msg)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

func TestSynthStopsOnCancel(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out, errb bytes.Buffer
	err := run(ctx, []string{"synth", "-o", filepath.Join(dir, "m.gguf"), "--layers", "1", "--embd", "64"}, &out, &errb)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want context.Canceled", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{
		"123": 123, "2GiB": 2 << 30, "2G": 2 << 30, "500MB": 500e6, "1.5GiB": 3 << 29, "64 KiB": 64 << 10, "10b": 10,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1G", "G", "1.2.3M", "5 parsecs", "0"} {
		if _, err := parseSize(bad); err == nil {
			t.Errorf("parseSize(%q): no error", bad)
		}
	}
}
