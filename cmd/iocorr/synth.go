package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/units"
)

func init() {
	register(&command{
		name:    "synth",
		summary: "write a random-weight model (llama, qwen3moe, qwen2moe, gpt-oss) that llama.cpp loads and runs",
		usage:   "-o MODEL.gguf [--arch llama|qwen3moe|qwen2moe|gpt-oss] [--size 2GiB | --layers N --embd N --ff N --heads N] [--experts N [--router-skew S]] [--type f16|f32|bf16|q8_0]",
		flags:   synthFlags,
	})
}

func synthFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	var spec gguf.SynthSpec
	out := fs.StringP("output", "o", "", "file to write (required); written to a temporary file, synced, then renamed")
	fs.IntVar(&spec.Layers, "layers", 16, "transformer blocks")
	fs.IntVar(&spec.Embd, "embd", 1024, "embedding width (n_embd)")
	fs.IntVar(&spec.FF, "ff", 0, "feed-forward width, per expert for MoE (default 2.75 × embd)")
	fs.IntVar(&spec.Heads, "heads", 0, "attention heads (default: head size 64, 128 from embd 4096 on)")
	fs.IntVar(&spec.KVHeads, "kv-heads", 0, "key/value heads for GQA (default: heads)")
	fs.IntVar(&spec.Experts, "experts", 0, "experts per layer (0: dense feed-forward)")
	fs.IntVar(&spec.ExpertsUsed, "experts-used", 0, "experts used per token (default min(2, experts))")
	typ := fs.String("type", "f16", "weight type: f16, f32, bf16 or q8_0 (norms are always f32); llama-quantize makes the others")
	fs.IntVar(&spec.Vocab, "vocab", 512, "vocabulary size (at least 259: 3 special + 256 byte tokens)")
	fs.IntVar(&spec.Ctx, "ctx", 2048, "context length")
	fs.Uint64Var(&spec.Seed, "seed", 1, "random seed; the same flags and seed give the same file")
	fs.StringVar(&spec.Name, "name", "iocorr-synth", "general.name")
	fs.StringVar(&spec.Arch, "arch", gguf.ArchLlama, "architecture: llama, or MoE only: qwen3moe, qwen2moe (shared expert), gpt-oss (expert biases, attention sinks)")
	fs.Float64Var(&spec.RouterSkew, "router-skew", 0, "make a few experts hot: picks fall off about as (1+rank)^-S per layer (0: near uniform, as random weights route)")
	size := fs.String("size", "", "target file size (e.g. 500MiB, 2GiB): picks the shape flags not given explicitly")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("synth: unexpected arguments %q", args)
		}
		if *out == "" {
			return usagef("synth: -o MODEL.gguf is required")
		}
		// Inside SynthSpec a zero means "the default", so a zero given on
		// the command line would be replaced silently: refuse it instead.
		for _, f := range []struct {
			name string
			v    int
		}{{"layers", spec.Layers}, {"embd", spec.Embd}, {"ff", spec.FF}, {"heads", spec.Heads}, {"kv-heads", spec.KVHeads}, {"vocab", spec.Vocab}, {"ctx", spec.Ctx}} {
			if fs.Changed(f.name) && f.v < 1 {
				return usagef("synth: --%s %d: want at least 1 (leave the flag out for its default)", f.name, f.v)
			}
		}
		switch {
		case spec.Experts < 0:
			return usagef("synth: --experts %d: want 0 (dense) or more", spec.Experts)
		case fs.Changed("experts-used") && spec.Experts > 0 && (spec.ExpertsUsed < 1 || spec.ExpertsUsed > spec.Experts):
			return usagef("synth: --experts-used %d: want 1 to --experts (%d)", spec.ExpertsUsed, spec.Experts)
		case fs.Changed("experts-used") && spec.Experts == 0 && spec.ExpertsUsed != 0:
			return usagef("synth: --experts-used %d without --experts", spec.ExpertsUsed)
		case !slices.Contains(gguf.SynthArchs, spec.Arch):
			return usagef("synth: --arch %q: want llama, qwen3moe, qwen2moe or gpt-oss", spec.Arch)
		case spec.Arch != gguf.ArchLlama && spec.Experts == 0:
			return usagef("synth: --arch %s is mixture-of-experts only: give --experts", spec.Arch)
		case fs.Changed("name") && spec.Name == "":
			return usagef("synth: --name is empty (leave the flag out for %q)", fs.Lookup("name").DefValue)
		}
		t, ok := gguf.ParseType(*typ)
		if !ok || !slices.Contains(gguf.SynthTypes, t) {
			return usagef("synth: --type %q: want f16, f32, bf16 or q8_0 (for K-quants, IQ or MXFP4 write bf16 and run llama.cpp's llama-quantize on it)", *typ)
		}
		spec.Type = t
		if *size != "" {
			target, err := units.ParseSize(*size)
			if err != nil {
				return usagef("synth: --size: %v", err)
			}
			// Shape flags given on the command line are kept; the rest
			// are chosen to reach the size.
			for flag, field := range map[string]*int{"layers": &spec.Layers, "embd": &spec.Embd, "ff": &spec.FF, "heads": &spec.Heads} {
				if !fs.Changed(flag) {
					*field = 0
				}
			}
			spec, err = gguf.SizeSynth(target, spec)
			if err != nil {
				return fmt.Errorf("synth: %w", err)
			}
		}
		spec = spec.WithDefaults()
		if err := spec.Validate(); err != nil {
			return usagef("synth: %v", err)
		}
		start := time.Now()
		n, err := gguf.CreateSynthContext(ctx, *out, spec)
		if err != nil {
			return fmt.Errorf("synth %s: %w", *out, err)
		}
		el := time.Since(start)
		layout, _ := spec.Layout()
		moe := ""
		if spec.Experts > 0 {
			moe = fmt.Sprintf(", %d experts (%d used)", spec.Experts, spec.ExpertsUsed)
		}
		fmt.Fprintf(stderr, "synth: %s: %s, %d tensors (%s, %d layers, embd %d, ff %d, heads %d/%d%s, %s) in %.2fs (%.0f MB/s incl. fsync)\n",
			*out, units.Bytes(float64(n)), len(layout.Tensors), spec.Arch, spec.Layers, spec.Embd, spec.FF, spec.Heads, spec.KVHeads, moe,
			spec.Type, el.Seconds(), float64(n)/1e6/math.Max(el.Seconds(), 1e-9))
		return nil
	}
}
