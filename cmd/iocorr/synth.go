package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/units"
)

func init() {
	register(&command{
		name:    "synth",
		summary: "write a random-weight model (llama, qwen3moe, qwen2moe, gpt-oss) that llama.cpp loads and runs",
		usage:   "-o MODEL.gguf [--like qwen3-30b-a3b|gpt-oss-20b] [--arch llama|qwen3moe|qwen2moe|gpt-oss] [--size 2GiB | --layers N --embd N --ff N --heads N] [--experts N [--router-skew S]] [--type f16|f32|bf16|q8_0|q4_k|q6_k|mxfp4]",
		flags:   synthFlags,
		man:     synthManual,
	})
}

func synthFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := gguf.SynthOptions{Given: fs.Changed}
	spec := &o.Spec
	out := fs.StringP("output", "o", "", "file to write (required); written to a temporary file, synced, then renamed")
	fs.IntVar(&spec.Layers, "layers", 16, "transformer blocks")
	fs.IntVar(&spec.Embd, "embd", 1024, "embedding width (n_embd)")
	fs.IntVar(&spec.FF, "ff", 0, "feed-forward width, per expert for MoE (default 2.75 × embd)")
	fs.IntVar(&spec.Heads, "heads", 0, "attention heads (default: head size 64, 128 from embd 4096 on)")
	fs.IntVar(&spec.KVHeads, "kv-heads", 0, "key/value heads for GQA (default: heads)")
	fs.IntVar(&spec.Experts, "experts", 0, "experts per layer (0: dense feed-forward)")
	fs.IntVar(&spec.ExpertsUsed, "experts-used", 0, "experts used per token (default min(2, experts))")
	fs.StringVar(&o.Type, "type", "f16", "weight type: f16, f32, bf16, q8_0, q4_k, q6_k or mxfp4 (experts; the rest q8_0); norms and routers are always f32")
	fs.StringVar(&o.Like, "like", "", "a released model's shape and type: "+strings.Join(gguf.SynthLikes(), ", ")+" (--layers, --ff, --kv-heads, the expert flags and --type given override it)")
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
		if *size != "" {
			var err error
			if o.Size, err = units.ParseSize(*size); err != nil {
				return usagef("synth: --size: %v", err)
			}
		}
		spec, err := o.Resolve()
		if err != nil {
			return usagef("synth: %v", err)
		}
		start := time.Now()
		n, err := gguf.CreateSynthContext(ctx, *out, spec)
		if err != nil {
			return fmt.Errorf("synth %s: %w", *out, err)
		}
		printSynthSummary(*out, spec, n, time.Since(start))
		return nil
	}
}

func printSynthSummary(out string, spec gguf.SynthSpec, n int64, el time.Duration) {
	layout, _ := spec.Layout()
	moe := ""
	if spec.Experts > 0 {
		moe = fmt.Sprintf(", %d experts (%d used)", spec.Experts, spec.ExpertsUsed)
	}
	fmt.Fprintf(stderr, "synth: %s: %s, %d tensors (%s, %d layers, embd %d, ff %d, heads %d/%d%s, %s) in %.2fs (%.0f MB/s incl. fsync)\n",
		out, units.Bytes(float64(n)), len(layout.Tensors), spec.Arch, spec.Layers, spec.Embd, spec.FF, spec.Heads, spec.KVHeads, moe,
		spec.Type, el.Seconds(), float64(n)/1e6/math.Max(el.Seconds(), 1e-9))
}
