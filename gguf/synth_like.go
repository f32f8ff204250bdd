package gguf

import (
	"fmt"
	"slices"
	"strings"
)

// synthLikes are the shapes of released models, from their published
// configs (config.json): what a study runs, at full size, for `synth
// --like`. Context length stays synth's default: the released ones
// (40,960 and 131,072) would make llama.cpp's default KV cache larger
// than the memory budgets studies run under.
var synthLikes = map[string]SynthSpec{
	// Qwen/Qwen3-30B-A3B: hidden_size 2048, 48 layers, 32 heads of
	// head_dim 128, 4 KV heads, 128 experts of moe_intermediate_size
	// 768, 8 per token, vocab 151,936. ~17 GiB in Q4_K.
	"qwen3-30b-a3b": {Name: "qwen3-30b-a3b-synth", Arch: ArchQwen3MoE, Layers: 48, Embd: 2048, FF: 768,
		Heads: 32, KVHeads: 4, HeadDim: 128, Experts: 128, ExpertsUsed: 8, Vocab: 151936, Type: TypeQ4_K},
	// openai/gpt-oss-20b: hidden_size 2880, 24 layers, 64 heads of
	// head_dim 64, 8 KV heads, 32 experts of intermediate_size 2880, 4
	// per token, vocab 201,088; experts in MXFP4.
	"gpt-oss-20b": {Name: "gpt-oss-20b-synth", Arch: ArchGPTOSS, Layers: 24, Embd: 2880, FF: 2880,
		Heads: 64, KVHeads: 8, HeadDim: 64, Experts: 32, ExpertsUsed: 4, Vocab: 201088, Type: TypeMXFP4},
}

// SynthLikes lists the names SynthLike knows, sorted.
func SynthLikes() []string {
	names := make([]string, 0, len(synthLikes))
	for n := range synthLikes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// SynthLike is the spec of a released model's shape (a name of
// SynthLikes, any case).
func SynthLike(name string) (SynthSpec, error) {
	s, ok := synthLikes[strings.ToLower(name)]
	if !ok {
		return SynthSpec{}, fmt.Errorf("like %q: want one of %s", name, strings.Join(SynthLikes(), ", "))
	}
	return s, nil
}
