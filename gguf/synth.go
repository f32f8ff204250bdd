package gguf

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/bits"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/internal/atomicfile"
)

// SynthSpec describes a random-weight model that llama.cpp loads and
// runs: experiments need models of chosen shapes and sizes, and no model
// can be downloaded here. Zero fields take the defaults of WithDefaults.
type SynthSpec struct {
	Name string // general.name; default "iocorr-synth"
	// Arch is general.architecture, one of SynthArchs; default "llama".
	// Each writes the tensors and hyperparameters llama.cpp's loader of
	// that architecture requires (src/models/<arch>.cpp of the shipped
	// source), with the optional ones the released models have.
	Arch    string
	Layers  int // default 16
	Embd    int // n_embd; default 1024
	FF      int // n_ff (per expert for MoE); default 2816
	Heads   int // default Embd/64
	KVHeads int // default Heads (no GQA)
	// HeadDim is the size of a query/key/value head; default Embd/Heads.
	// Real models may differ (Qwen3-30B-A3B: 32 heads of 128 on an
	// embedding of 2048), making attn_q Heads·HeadDim wide.
	HeadDim     int
	Experts     int // 0 for a dense model
	ExpertsUsed int // default min(2, Experts)
	// Type is the weights' type: F32 (the zero value), F16, BF16, Q8_0,
	// Q4_K, Q6_K, or MXFP4 (expert weights; the others Q8_0, as
	// llama-quantize's MXFP4_MOE writes them).
	Type  Type
	Vocab int // at least 259 (3 specials + 256 byte tokens); default 512
	Ctx   int // context length; default 2048
	Seed  uint64
	// RouterSkew S > 0 makes the router prefer a few experts per layer:
	// the expert of rank r gets a logit bias of −S·ln(1+r) noise units,
	// so shares fall off about as (1+r)^−S (synth_skew.go says how).
	// 0 routes near uniformly, as random weights do.
	RouterSkew float64
}

// SynthTypes are the tensor types synth can fill with random values.
var SynthTypes = []Type{TypeF32, TypeF16, TypeBF16, TypeQ8_0, TypeQ4_K, TypeQ6_K, TypeMXFP4}

// synthBlockTypes are the quantized ones, written block by block
// (synth_quant.go).
var synthBlockTypes = []Type{TypeQ8_0, TypeQ4_K, TypeQ6_K, TypeMXFP4}

// Architectures synth writes, as general.architecture names them.
const (
	// ArchLlama is llama, dense or MoE (Mixtral's layout).
	ArchLlama = "llama"
	// ArchQwen3MoE is Qwen3-MoE (Qwen3-30B-A3B): per-head q/k norms, no
	// shared expert, routing weights normalized.
	ArchQwen3MoE = "qwen3moe"
	// ArchQwen2MoE is Qwen1.5/2-MoE: q/k/v biases and a shared expert
	// (ffn_*_shexp) gated by ffn_gate_inp_shexp beside the routed ones.
	ArchQwen2MoE = "qwen2moe"
	// ArchGPTOSS is gpt-oss (llama.cpp's LLM_ARCH_OPENAI_MOE): attention
	// sinks, biases on attention and on every expert (*_exps.bias,
	// {n, n_expert}), a router bias, SwiGLU-OAI, sliding-window attention
	// on every other layer.
	ArchGPTOSS = "gpt-oss"
)

// SynthArchs are the architectures synth writes; every one but llama is
// MoE only.
var SynthArchs = []string{ArchLlama, ArchQwen3MoE, ArchQwen2MoE, ArchGPTOSS}

// synthSlidingWindow is gpt-oss's attention.sliding_window (128 in the
// released models).
const synthSlidingWindow = 128

const synthMinVocab = 3 + 256

// WithDefaults fills zero fields.
func (s SynthSpec) WithDefaults() SynthSpec {
	if s.Name == "" {
		s.Name = "iocorr-synth"
	}
	if s.Arch == "" {
		s.Arch = ArchLlama
	}
	if s.Layers == 0 {
		s.Layers = 16
	}
	if s.Embd == 0 {
		s.Embd = 1024
	}
	if s.FF == 0 {
		s.FF = defaultFF(s.Embd)
	}
	if s.Heads == 0 {
		s.Heads = defaultHeads(s.Embd)
	}
	if s.KVHeads == 0 {
		s.KVHeads = s.Heads
	}
	if s.HeadDim == 0 && s.Heads > 0 && s.Embd%s.Heads == 0 {
		s.HeadDim = s.Embd / s.Heads
	}
	if s.Experts > 0 && s.ExpertsUsed == 0 {
		s.ExpertsUsed = min(2, s.Experts)
	}
	if s.Vocab == 0 {
		s.Vocab = 512
	}
	if s.Ctx == 0 {
		s.Ctx = 2048
	}
	return s
}

// defaultFF is llama's 2.75 × n_embd (1024 → 2816), a multiple of 32 so
// that Q8_0 rows of ffn_down fit whole blocks.
func defaultFF(embd int) int { return max(32, (embd*11/4+31)/32*32) }

// defaultHeads picks a head size of 128 for wide models, else 64, else
// the largest even size that divides n_embd.
func defaultHeads(embd int) int {
	for _, hd := range []int{128, 64, 32, 16, 8, 4, 2} {
		if hd == 128 && embd < 4096 {
			continue
		}
		if embd%hd == 0 && embd/hd >= 1 {
			return embd / hd
		}
	}
	return 1
}

// Validate reports shape errors that would make llama.cpp refuse the
// model or make a tensor unrepresentable. It expects WithDefaults applied.
func (s SynthSpec) Validate() error {
	if err := s.checkArch(); err != nil {
		return err
	}
	switch {
	case s.Layers < 1 || s.Layers > 1000:
		return fmt.Errorf("layers %d: want 1 to 1000", s.Layers)
	case s.Embd < 2:
		return fmt.Errorf("embd %d: want at least 2", s.Embd)
	case s.FF < 1:
		return fmt.Errorf("ff %d: want at least 1", s.FF)
	case s.Heads < 1 || s.HeadDim == 0 && s.Embd%s.Heads != 0:
		return fmt.Errorf("heads %d must divide embd %d", s.Heads, s.Embd)
	case s.HeadDim < 1 || s.HeadDim%2 != 0:
		return fmt.Errorf("head size %d must be even (rotary embedding)", s.HeadDim)
	case s.KVHeads < 1 || s.Heads%s.KVHeads != 0:
		return fmt.Errorf("kv-heads %d must divide heads %d", s.KVHeads, s.Heads)
	case s.Experts < 0 || s.Experts > 1024:
		return fmt.Errorf("experts %d: want 0 (dense) to 1024", s.Experts)
	case s.Experts > 0 && (s.ExpertsUsed < 1 || s.ExpertsUsed > s.Experts):
		return fmt.Errorf("experts-used %d: want 1 to experts (%d)", s.ExpertsUsed, s.Experts)
	case s.Experts == 0 && s.ExpertsUsed != 0:
		return fmt.Errorf("experts-used %d without experts", s.ExpertsUsed)
	case s.Vocab < synthMinVocab || s.Vocab > 1<<20:
		return fmt.Errorf("vocab %d: want %d (3 special + 256 byte tokens) to %d", s.Vocab, synthMinVocab, 1<<20)
	case s.Ctx < 1:
		return fmt.Errorf("ctx %d: want at least 1", s.Ctx)
	case !(s.RouterSkew >= 0 && s.RouterSkew <= 100):
		return fmt.Errorf("router skew %g: want 0 (none) to 100", s.RouterSkew)
	case s.RouterSkew > 0 && s.Experts == 0:
		return fmt.Errorf("router skew %g without experts", s.RouterSkew)
	}
	ok := false
	for _, t := range SynthTypes {
		ok = ok || t == s.Type
	}
	if !ok {
		return fmt.Errorf("type %s: synth writes only F32, F16, BF16, Q8_0, Q4_K, Q6_K and MXFP4", s.Type)
	}
	if s.Type == TypeMXFP4 && s.Experts == 0 {
		return fmt.Errorf("type MXFP4 is for expert weights: give experts")
	}
	// Rows (ne[0]) hold whole blocks: n_embd for most weights, n_ff for
	// ffn_down, heads × head size for attn_output.
	for _, row := range []struct {
		what string
		n    int
		typ  Type
	}{
		{"embd", s.Embd, s.weightType("attn_q")},
		{"embd", s.Embd, s.weightType("ffn_up_exps")},
		{"ff", s.FF, s.weightType("ffn_down")},
		{"ff", s.FF, s.weightType("ffn_down_exps")},
		{"heads × head size", s.Heads * s.HeadDim, s.weightType("attn_output")},
	} {
		if b := int(row.typ.BlockSize()); row.n%b != 0 {
			return fmt.Errorf("%s %d must be a multiple of %d for %s", row.what, row.n, b, row.typ)
		}
	}
	return nil
}

// Token types of llama.cpp's SPM vocabulary (llama_token_type).
const (
	tokNormal  int32 = 1
	tokUnknown int32 = 2
	tokControl int32 = 3
	tokByte    int32 = 6
)

// synthVocab is <unk>, <s>, </s>, the 256 byte tokens (so that any text
// tokenizes through byte fallback), then ordinary pieces up to n.
func synthVocab(n int) (tokens []string, scores []float32, types []int32) {
	add := func(tok string, score float32, typ int32) {
		tokens = append(tokens, tok)
		scores = append(scores, score)
		types = append(types, typ)
	}
	add("<unk>", 0, tokUnknown)
	add("<s>", 0, tokControl)
	add("</s>", 0, tokControl)
	for b := 0; b < 256; b++ {
		add(fmt.Sprintf("<0x%02X>", b), 0, tokByte)
	}
	seen := map[string]bool{}
	var pieces []string
	for _, w := range strings.Fields("the a and of to in is that it for on with as was he be at by this had not are but from or have an they which one you were all we her she there can") {
		pieces = append(pieces, "▁"+w)
	}
	pieces = append(pieces, "▁")
	for c := 'a'; c <= 'z'; c++ {
		pieces = append(pieces, string(c), "▁"+string(c))
	}
	for c := 'A'; c <= 'Z'; c++ {
		pieces = append(pieces, string(c), "▁"+string(c))
	}
	for c := '0'; c <= '9'; c++ {
		pieces = append(pieces, string(c))
	}
	pieces = append(pieces, ".", ",", "!", "?", "'", "-", ":", ";")
	for i := 0; len(tokens) < n; i++ {
		var p string
		if i < len(pieces) {
			p = pieces[i]
		} else {
			// Two-letter pieces, then numbered filler, keep tokens unique.
			j := i - len(pieces)
			if j < 26*26 {
				p = "▁" + string(rune('a'+j/26)) + string(rune('a'+j%26))
			} else {
				p = fmt.Sprintf("▁w%d", j)
			}
		}
		if seen[p] {
			continue
		}
		seen[p] = true
		add(p, -float32(len(tokens)), tokNormal)
	}
	return tokens, scores, types
}

// weightType is the type synth writes a weight of this role in.
func (s SynthSpec) weightType(role string) Type {
	if s.Type == TypeMXFP4 && !isExpertRole(role) {
		return TypeQ8_0
	}
	return s.Type
}

// fileType is llama_ftype for general.file_type (llama.h).
func fileType(t Type) uint32 {
	switch t {
	case TypeF32:
		return 0
	case TypeF16:
		return 1
	case TypeQ8_0:
		return 7
	case TypeQ4_K:
		return 14 // LLAMA_FTYPE_MOSTLY_Q4_K_S: every weight Q4_K
	case TypeQ6_K:
		return 18
	case TypeBF16:
		return 32
	case TypeMXFP4:
		return 38 // LLAMA_FTYPE_MOSTLY_MXFP4_MOE
	}
	return 0
}

// Writer returns the Writer for the model (metadata and tensor infos).
func (s SynthSpec) Writer() (*Writer, error) {
	s = s.WithDefaults()
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("gguf: synth: %w", err)
	}
	tokens, scores, types := synthVocab(s.Vocab)
	u := func(v int) uint32 { return uint32(v) }
	a := s.Arch + "."
	hd := s.HeadDim
	md := Metadata{
		{Key: "general.architecture", Value: s.Arch},
		{Key: "general.name", Value: s.Name},
		{Key: "general.alignment", Value: uint32(DefaultAlignment)},
		{Key: "general.file_type", Value: fileType(s.Type)},
		{Key: "general.quantization_version", Value: uint32(2)},
		{Key: a + "context_length", Value: u(s.Ctx)},
		{Key: a + "embedding_length", Value: u(s.Embd)},
		{Key: a + "block_count", Value: u(s.Layers)},
		{Key: a + "feed_forward_length", Value: u(s.FF)},
		{Key: a + "attention.head_count", Value: u(s.Heads)},
		{Key: a + "attention.head_count_kv", Value: u(s.KVHeads)},
		{Key: a + "rope.dimension_count", Value: u(hd)},
		{Key: a + "rope.freq_base", Value: float32(10000)},
		{Key: a + "attention.layer_norm_rms_epsilon", Value: float32(1e-5)},
		{Key: a + "vocab_size", Value: u(s.Vocab)},
	}
	if s.Experts > 0 {
		md = append(md,
			KV{Key: a + "expert_count", Value: u(s.Experts)},
			KV{Key: a + "expert_used_count", Value: u(s.ExpertsUsed)})
	}
	if hd*s.Heads != s.Embd && s.Arch != ArchQwen3MoE && s.Arch != ArchGPTOSS {
		md = append(md,
			KV{Key: a + "attention.key_length", Value: u(hd)},
			KV{Key: a + "attention.value_length", Value: u(hd)})
	}
	switch s.Arch {
	case ArchQwen3MoE:
		md = append(md,
			KV{Key: a + "expert_feed_forward_length", Value: u(s.FF)},
			KV{Key: a + "attention.key_length", Value: u(hd)},
			KV{Key: a + "attention.value_length", Value: u(hd)})
	case ArchQwen2MoE:
		// The shared expert is as wide as a routed one here; Qwen1.5-MoE's
		// is four times wider, a shape any --ff cannot give both.
		md = append(md,
			KV{Key: a + "expert_feed_forward_length", Value: u(s.FF)},
			KV{Key: a + "expert_shared_feed_forward_length", Value: u(s.FF)})
	case ArchGPTOSS:
		md = append(md,
			KV{Key: a + "expert_feed_forward_length", Value: u(s.FF)},
			KV{Key: a + "attention.key_length", Value: u(hd)},
			KV{Key: a + "attention.value_length", Value: u(hd)},
			KV{Key: a + "attention.sliding_window", Value: uint32(synthSlidingWindow)})
	}
	md = append(md,
		KV{Key: "tokenizer.ggml.model", Value: "llama"},
		KV{Key: "tokenizer.ggml.tokens", Value: Array{Elem: ValueString, Values: tokens}},
		KV{Key: "tokenizer.ggml.scores", Value: Array{Elem: ValueFloat32, Values: scores}},
		KV{Key: "tokenizer.ggml.token_type", Value: Array{Elem: ValueInt32, Values: types}},
		KV{Key: "tokenizer.ggml.unknown_token_id", Value: uint32(0)},
		KV{Key: "tokenizer.ggml.bos_token_id", Value: uint32(1)},
		KV{Key: "tokenizer.ggml.eos_token_id", Value: uint32(2)},
		KV{Key: "tokenizer.ggml.add_bos_token", Value: true},
		KV{Key: "tokenizer.ggml.add_eos_token", Value: false},
	)

	e, ff, v := int64(s.Embd), int64(s.FF), int64(s.Vocab)
	kv := int64(hd) * int64(s.KVHeads) // n_embd_k_gqa
	q := int64(hd) * int64(s.Heads)    // n_embd_head_k · n_head
	x := int64(s.Experts)
	// Weights are of weightType; norms, biases, sinks and routers are
	// F32, as converters write them and llama-quantize leaves them.
	w := func(name string, dims ...int64) TensorInfo {
		_, role := ParseName(name)
		return TensorInfo{Name: name, Type: s.weightType(role), Dims: dims}
	}
	f32 := func(name string, dims ...int64) TensorInfo { return TensorInfo{Name: name, Type: TypeF32, Dims: dims} }
	ts := []TensorInfo{w("token_embd.weight", e, v)}
	for l := 0; l < s.Layers; l++ {
		p := fmt.Sprintf("blk.%d.", l)
		ts = append(ts, f32(p+"attn_norm.weight", e))
		if s.Arch == ArchGPTOSS {
			ts = append(ts, f32(p+"post_attention_norm.weight", e))
		}
		ts = append(ts, w(p+"attn_q.weight", e, q), w(p+"attn_k.weight", e, kv), w(p+"attn_v.weight", e, kv))
		if s.Arch == ArchQwen2MoE || s.Arch == ArchGPTOSS {
			ts = append(ts, f32(p+"attn_q.bias", q), f32(p+"attn_k.bias", kv), f32(p+"attn_v.bias", kv))
		}
		ts = append(ts, w(p+"attn_output.weight", q, e))
		switch s.Arch {
		case ArchQwen3MoE:
			ts = append(ts, f32(p+"attn_q_norm.weight", int64(hd)), f32(p+"attn_k_norm.weight", int64(hd)))
		case ArchGPTOSS:
			ts = append(ts, f32(p+"attn_output.bias", e), f32(p+"attn_sinks.weight", int64(s.Heads)))
		}
		if s.Arch != ArchGPTOSS {
			ts = append(ts, f32(p+"ffn_norm.weight", e))
		}
		if s.Experts == 0 {
			ts = append(ts, w(p+"ffn_gate.weight", e, ff), w(p+"ffn_down.weight", ff, e), w(p+"ffn_up.weight", e, ff))
			continue
		}
		ts = append(ts, f32(p+"ffn_gate_inp.weight", e, x))
		if s.Arch == ArchGPTOSS {
			ts = append(ts, f32(p+"ffn_gate_inp.bias", x))
		}
		ts = append(ts,
			w(p+"ffn_gate_exps.weight", e, ff, x),
			w(p+"ffn_down_exps.weight", ff, e, x),
			w(p+"ffn_up_exps.weight", e, ff, x))
		switch s.Arch {
		case ArchGPTOSS:
			ts = append(ts,
				f32(p+"ffn_gate_exps.bias", ff, x),
				f32(p+"ffn_down_exps.bias", e, x),
				f32(p+"ffn_up_exps.bias", ff, x))
		case ArchQwen2MoE:
			ts = append(ts,
				f32(p+"ffn_gate_inp_shexp.weight", e),
				w(p+"ffn_gate_shexp.weight", e, ff),
				w(p+"ffn_down_shexp.weight", ff, e),
				w(p+"ffn_up_shexp.weight", e, ff))
		}
	}
	ts = append(ts, f32("output_norm.weight", e), w("output.weight", e, v))
	return &Writer{Metadata: md, Tensors: ts}, nil
}

// Layout is the file the spec produces, without writing it.
func (s SynthSpec) Layout() (*File, error) {
	w, err := s.Writer()
	if err != nil {
		return nil, err
	}
	return w.Layout()
}

// WriteSynth writes the model to w and returns the bytes written. The
// output depends only on the spec (and its Seed).
func WriteSynth(w io.Writer, s SynthSpec) (int64, error) {
	gw, err := s.Writer()
	if err != nil {
		return 0, err
	}
	buf := make([]byte, synthChunk)
	skew := newSynthSkew(s.WithDefaults())
	return gw.Write(w, func(t *Tensor, w io.Writer) error {
		return synthData(w, t, s.Seed, buf, skew)
	})
}

// CreateSynth writes the model to path through a temporary file in the
// same directory, synced before the rename: a model left dirty in the
// page cache survives drop_caches and would make a later cold-cache
// experiment do no I/O at all. It returns the file size.
func CreateSynth(path string, s SynthSpec) (int64, error) {
	return CreateSynthContext(context.Background(), path, s)
}

// CreateSynthContext is CreateSynth that stops, leaving no file, when
// ctx is cancelled.
func CreateSynthContext(ctx context.Context, path string, s SynthSpec) (int64, error) {
	if _, err := s.Writer(); err != nil {
		return 0, err // before creating anything
	}
	var n int64
	err := atomicfile.Write(path, 0o644, true, func(w io.Writer) (err error) {
		n, err = WriteSynth(ctxWriter{ctx, w}, s)
		return err
	})
	if err != nil {
		return n, err
	}
	return n, nil
}

// ctxWriter fails writes once ctx is done; writes are multi-MiB, so the
// check is cheap and an interrupt is honoured within milliseconds.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// synthChunk is a multiple of 8 (PRNG words) and of 34 (Q8_0 blocks).
const synthChunk = 8 * 34 * 16384

// rng is wyrand: one multiply per 8 random bytes, so generating weights
// runs well above disk speed.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

func (r *rng) fill(b []byte) {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.next())
	}
	if i < len(b) {
		var tail [8]byte
		binary.LittleEndian.PutUint64(tail[:], r.next())
		copy(b[i:], tail[:])
	}
}

// synthData writes t.Size bytes of small random values: weights of
// magnitude below 0.03 with random sign, so activations stay sane, and
// norm weights of exactly 1; a router skew (nil for none) zeroes some
// tensors and sets some elements.
func synthData(w io.Writer, t *Tensor, seed uint64, buf []byte, skew *synthSkew) error {
	r := rng{s: seed*0x9e3779b97f4a7c15 + uint64(t.Index)*0xbf58476d1ce4e5b9 + 1}
	norm := strings.HasSuffix(t.Role, "norm")
	zero := skew != nil && skew.zero(t)
	left := t.Size
	chunk := int64(len(buf)) / t.Type.TypeSize() * t.Type.TypeSize() // whole blocks
	for left > 0 {
		b := buf[:min(chunk, left)]
		switch {
		case zero:
			clear(b)
		case norm && t.Type == TypeF32:
			for i := 0; i+4 <= len(b); i += 4 {
				binary.LittleEndian.PutUint32(b[i:], 0x3f800000) // 1.0
			}
		case t.Type == TypeF32:
			// Keep sign and mantissa; exponent 120 or 121 gives
			// magnitudes in [2^-7, 2^-5).
			fillFloats(b, &r, 4, 0x80ffffff, 0x3c000000)
		case t.Type == TypeF16:
			// Half exponents 8 or 9: magnitudes in [2^-7, 2^-5).
			fillFloats(b, &r, 2, 0x87ff, 0x2000)
		case t.Type == TypeBF16:
			// bf16 is the top half of an f32: exponent 120 or 121.
			fillFloats(b, &r, 2, 0x80ff, 0x3c00)
		case slices.Contains(synthBlockTypes, t.Type):
			fillBlocks(t.Type, b, &r)
		default:
			return fmt.Errorf("synth cannot fill %s", t.Type)
		}
		if skew != nil && !zero {
			skew.patch(t, b, t.Size-left)
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		left -= int64(len(b))
	}
	return nil
}

// fixTail applies f to the elements of size sz in the last len(b)%8
// bytes, which the 8-byte loops skip.
// fillFloats fills b with random floats of sz bytes, each keeping only
// the bits of keep and setting those of set (the exponent that bounds its
// magnitude), a word at a time and then the tail.
func fillFloats(b []byte, r *rng, sz int, keep, set uint64) {
	r.fill(b)
	keep64, set64 := keep, set
	for w := sz * 8; w < 64; w *= 2 {
		keep64 |= keep64 << w
		set64 |= set64 << w
	}
	for i := 0; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		binary.LittleEndian.PutUint64(b[i:], x&keep64|set64)
	}
	fixTail(b, sz, func(x uint64) uint64 { return x&keep | set })
}

func fixTail(b []byte, sz int, f func(uint64) uint64) {
	for i := len(b) / 8 * 8; i+sz <= len(b); i += sz {
		switch sz {
		case 2:
			binary.LittleEndian.PutUint16(b[i:], uint16(f(uint64(binary.LittleEndian.Uint16(b[i:])))))
		case 4:
			binary.LittleEndian.PutUint32(b[i:], uint32(f(uint64(binary.LittleEndian.Uint32(b[i:])))))
		}
	}
}

// SizeSynth fills the shape fields of s that are zero (Layers, Embd, FF,
// Heads) so that the file comes out close to target bytes: width grows
// with the cube root of the size and depth with the width (about
// n_embd/64 layers, as in real models), then the layer count and the
// feed-forward width are tuned to the exact size. Fields that are set
// are kept.
func SizeSynth(target int64, s SynthSpec) (SynthSpec, error) {
	fixed := s
	d := s.WithDefaults()
	sizeOf := func(c SynthSpec) int64 {
		f, err := c.Layout()
		if err != nil {
			return -1
		}
		return f.Size
	}
	layersFor := func(e int) int {
		if fixed.Layers > 0 {
			return fixed.Layers
		}
		return max(1, e/64)
	}
	// headsFor keeps explicit head counts and otherwise picks one that
	// divides e with an even head size and is a multiple of the KV heads.
	headsFor := func(e int) (heads, kv int) {
		kv = fixed.KVHeads
		if fixed.Heads > 0 {
			heads = fixed.Heads
		} else {
			heads = defaultHeads(e)
			if kv > 0 && heads%kv != 0 {
				heads = 0
				for m := kv; m <= e/2; m += kv {
					if e%m == 0 && (e/m)%2 == 0 {
						heads = m
						if m >= defaultHeads(e) {
							break
						}
					}
				}
			}
		}
		if heads == 0 || e%heads != 0 || (e/heads)%2 != 0 {
			return 0, 0
		}
		if kv == 0 {
			kv = heads
		}
		return heads, kv
	}
	cand := d
	if fixed.Embd == 0 {
		step := 128
		if d.Type.BlockSize() > int64(step) {
			step = int(d.Type.BlockSize())
		}
		if fixed.Heads > 0 {
			step = lcm(step, 2*fixed.Heads)
		}
		cand.Embd = 0
		for e := step; e <= 1<<16; e += step {
			c := d
			c.Embd, c.Layers = e, layersFor(e)
			c.Heads, c.KVHeads = headsFor(e)
			if c.Heads == 0 {
				continue
			}
			if fixed.FF == 0 {
				c.FF = defaultFF(e)
			}
			if sz := sizeOf(c); sz < 0 || sz > target {
				if cand.Embd == 0 {
					cand = c // too big already: SizeSynth's final check reports it
				}
				break
			}
			cand = c
		}
		if cand.Embd == 0 {
			return s, fmt.Errorf("gguf: synth: no embedding width fits heads %d and kv-heads %d", fixed.Heads, fixed.KVHeads)
		}
	} else if h, kv := headsFor(cand.Embd); h > 0 {
		cand.Heads, cand.KVHeads = h, kv
	}
	if fixed.FF == 0 {
		cand.FF = defaultFF(cand.Embd)
	}
	if fixed.Layers == 0 {
		one, two := cand, cand
		one.Layers, two.Layers = 1, 2
		s1, s2 := sizeOf(one), sizeOf(two)
		if s1 < 0 {
			return s, one.Validate()
		}
		per := s2 - s1
		cand.Layers = max(1, int(math.Round(float64(target-(s1-per))/float64(per))))
	}
	if fixed.FF == 0 {
		// Size grows with FF: find the multiple of 32 closest to target.
		lo, hi := 1, max(2, 16*cand.Embd/32)
		for lo < hi {
			m := (lo + hi) / 2
			c := cand
			c.FF = m * 32
			if sz := sizeOf(c); sz >= 0 && sz < target {
				lo = m + 1
			} else {
				hi = m
			}
		}
		best, bestDiff := cand.FF, int64(math.MaxInt64)
		for _, m := range []int{lo - 1, lo} {
			if m < 1 {
				continue
			}
			c := cand
			c.FF = m * 32
			if sz := sizeOf(c); sz >= 0 {
				if diff := abs64(sz - target); diff < bestDiff {
					best, bestDiff = c.FF, diff
				}
			}
		}
		cand.FF = best
	}
	sz := sizeOf(cand)
	if sz < 0 {
		return cand, cand.Validate()
	}
	if float64(abs64(sz-target)) > 0.1*float64(target) {
		return cand, fmt.Errorf("gguf: synth: cannot reach %d bytes with these settings: closest is %d (layers %d, embd %d, ff %d)",
			target, sz, cand.Layers, cand.Embd, cand.FF)
	}
	return cand, nil
}

func lcm(a, b int) int {
	g, h := a, b
	for h != 0 {
		g, h = h, g%h
	}
	return a / g * b
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}
