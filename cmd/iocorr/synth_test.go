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

// Every flag value that synth cannot honour is refused with one line, and
// nothing is written: in particular a zero that would otherwise stand for
// "the default" and be replaced silently.
func TestSynthRefusesWhatItCannotHonour(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "m.gguf")
	small := []string{"synth", "-o", out, "--layers", "1", "--embd", "64"}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"synth"}, "-o MODEL.gguf is required"},
		{[]string{"synth", "-o", out, "extra"}, "unexpected arguments"},
		{[]string{"synth", "-o", out, "--type", "iq4_xs"}, `type "iq4_xs": want f16, f32, bf16, q8_0, q4_k, q6_k or mxfp4`},
		{[]string{"synth", "-o", out, "--like", "llama-7b"}, `like "llama-7b": want one of gpt-oss-20b, qwen3-30b-a3b`},
		{[]string{"synth", "-o", out, "--like", "gpt-oss-20b", "--type", "q4_k"}, "embd 2880 must be a multiple of 256 for Q4_K"},
		{[]string{"synth", "-o", out, "--like", "gpt-oss-20b", "--size", "1GiB"}, "like fixes arch, embd, heads and the size"},
		{append(small, "--router-skew", "1"), "router skew 1 without experts"},
		{append(small, "--experts", "4", "--router-skew", "-1"), "router skew -1: want 0 (none) to 100"},
		{append(small, "--type", "mxfp4"), "type MXFP4 is for expert weights: give experts"},
		{[]string{"synth", "-o", out, "--layers", "0"}, "layers 0: want at least 1"},
		{[]string{"synth", "-o", out, "--layers", "-3"}, "layers -3: want at least 1"},
		{[]string{"synth", "-o", out, "--layers", "1001"}, "layers 1001: want 1 to 1000"},
		{[]string{"synth", "-o", out, "--embd", "0"}, "embd 0: want at least 1"},
		{[]string{"synth", "-o", out, "--embd", "1", "--heads", "1"}, "embd 1: want at least 2"},
		{[]string{"synth", "-o", out, "--ff", "0"}, "ff 0: want at least 1"},
		{append(small, "--heads", "0"), "heads 0: want at least 1"},
		{[]string{"synth", "-o", out, "--embd", "100", "--heads", "3"}, "heads 3 must divide embd 100"},
		{[]string{"synth", "-o", out, "--embd", "96", "--heads", "32"}, "head size 3 must be even"},
		{append(small, "--kv-heads", "0"), "kv-heads 0: want at least 1"},
		{append(small, "--heads", "4", "--kv-heads", "3"), "kv-heads 3 must divide heads 4"},
		{append(small, "--heads", "4", "--kv-heads", "8"), "kv-heads 8 must divide heads 4"},
		{append(small, "--experts", "-1"), "experts -1: want 0 (dense) to 1024"},
		{append(small, "--experts", "1025"), "experts 1025: want 0 (dense) to 1024"},
		{append(small, "--experts", "8", "--experts-used", "0"), "experts-used 0: want 1 to experts (8)"},
		{append(small, "--experts", "8", "--experts-used", "9"), "experts-used 9: want 1 to experts (8)"},
		{append(small, "--experts-used", "2"), "experts-used 2 without experts"},
		{append(small, "--vocab", "0"), "vocab 0: want at least 1"},
		{append(small, "--vocab", "258"), "vocab 258: want 259 (3 special + 256 byte tokens)"},
		{append(small, "--ctx", "0"), "ctx 0: want at least 1"},
		{append(small, "--arch", "mixtral", "--experts", "4"), `arch "mixtral": want one of llama, qwen3moe, qwen2moe, gpt-oss`},
		{append(small, "--arch", "gpt-oss"), "arch gpt-oss is mixture-of-experts only: give experts"},
		{append(small, "--name", ""), `name is empty (leave it out for "iocorr-synth")`},
		{[]string{"synth", "-o", out, "--type", "q8_0", "--embd", "48", "--heads", "2"}, "embd 48 must be a multiple of 32 for Q8_0"},
		{[]string{"synth", "-o", out, "--type", "q8_0", "--embd", "64", "--ff", "48"}, "ff 48 must be a multiple of 32 for Q8_0"},
		{[]string{"synth", "-o", out, "--size", "lots"}, "not a size"},
		{[]string{"synth", "-o", out, "--size", "2XB"}, "unknown unit"},
		{[]string{"synth", "-o", out, "--size", "0"}, `"0" is not a size`},
		{[]string{"synth", "-o", out, "--size", "100B"}, "cannot reach 100 bytes"},
		{[]string{"synth", "-o", out, "--size", "24MiB", "--layers", "0"}, "layers 0: want at least 1"},
	} {
		_, _, err := runCmd(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.msg) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error %v, want one line with %q", c.args[1:], err, c.msg)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

// A flag left out gets the default its help names, and that is what the
// file says when read back.
func TestSynthWritesTheDefaultsOfFlagsLeftOut(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want map[string]int64
	}{
		{"embd 1024, ff 2.75×embd, head size 64, no GQA, dense, vocab 512, ctx 2048", []string{"--layers", "1"}, map[string]int64{
			"llama.block_count": 1, "llama.embedding_length": 1024, "llama.feed_forward_length": 2816,
			"llama.attention.head_count": 16, "llama.attention.head_count_kv": 16, "llama.context_length": 2048,
			"len(tokenizer.ggml.tokens)": 512, "llama.expert_count": -1, "llama.expert_used_count": -1,
		}},
		{"16 layers", []string{"--embd", "64"}, map[string]int64{
			"llama.block_count": 16, "llama.embedding_length": 64, "llama.feed_forward_length": 192,
			"llama.attention.head_count": 1, "llama.attention.head_count_kv": 1,
		}},
		{"kv heads follow explicit heads", []string{"--layers", "1", "--embd", "64", "--heads", "4"}, map[string]int64{
			"llama.attention.head_count": 4, "llama.attention.head_count_kv": 4,
		}},
		{"two experts used of eight", []string{"--layers", "1", "--embd", "64", "--experts", "8"}, map[string]int64{
			"llama.expert_count": 8, "llama.expert_used_count": 2,
		}},
		{"one expert used of one", []string{"--layers", "1", "--embd", "64", "--experts", "1"}, map[string]int64{
			"llama.expert_count": 1, "llama.expert_used_count": 1,
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "m.gguf")
			if _, _, err := runCmd(t, append([]string{"synth", "-o", path}, c.args...)...); err != nil {
				t.Fatal(err)
			}
			f, err := gguf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			if name, _ := f.Metadata.String("general.name"); name != "iocorr-synth" {
				t.Errorf("general.name %q, want iocorr-synth", name)
			}
			if q := f.Tensor("blk.0.attn_q.weight"); q == nil || q.Type != gguf.TypeF16 {
				t.Errorf("attn_q %+v, want F16", q)
			}
			for key, want := range c.want {
				got, ok := f.Metadata.Int(key)
				if key == "len(tokenizer.ggml.tokens)" {
					tokens, _ := f.Metadata.Array("tokenizer.ggml.tokens")
					got, ok = int64(tokens.Len()), true
				}
				if !ok {
					got = -1 // absent
				}
				if got != want {
					t.Errorf("%s = %d, want %d (-1: absent)", key, got, want)
				}
			}
		})
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
