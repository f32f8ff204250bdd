package gguf

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// synthSeed is a tiny MoE model, small enough for the fuzz corpus.
func synthSeed(t testing.TB) []byte {
	var b bytes.Buffer
	spec := SynthSpec{Layers: 1, Embd: 8, FF: 8, Heads: 2, Experts: 2, Vocab: synthMinVocab, Type: TypeF16}
	if _, err := WriteSynth(&b, spec); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestSynthDenseLayoutMatchesLlamaConventions(t *testing.T) {
	spec := SynthSpec{Layers: 2, Embd: 64, FF: 96, Heads: 4, KVHeads: 2, Type: TypeQ8_0, Vocab: 300, Seed: 7}
	path := filepath.Join(t.TempDir(), "m.gguf")
	n, err := CreateSynth(path, spec)
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if f.Size != n {
		t.Errorf("wrote %d bytes, file is %d", n, f.Size)
	}
	want := map[string]struct {
		typ  Type
		dims []int64
	}{
		"token_embd.weight":        {TypeQ8_0, []int64{64, 300}},
		"blk.0.attn_norm.weight":   {TypeF32, []int64{64}},
		"blk.1.attn_q.weight":      {TypeQ8_0, []int64{64, 64}},
		"blk.1.attn_k.weight":      {TypeQ8_0, []int64{64, 32}},
		"blk.1.attn_v.weight":      {TypeQ8_0, []int64{64, 32}},
		"blk.1.attn_output.weight": {TypeQ8_0, []int64{64, 64}},
		"blk.1.ffn_gate.weight":    {TypeQ8_0, []int64{64, 96}},
		"blk.1.ffn_down.weight":    {TypeQ8_0, []int64{96, 64}},
		"blk.1.ffn_up.weight":      {TypeQ8_0, []int64{64, 96}},
		"output_norm.weight":       {TypeF32, []int64{64}},
		"output.weight":            {TypeQ8_0, []int64{64, 300}},
	}
	for name, w := range want {
		tn := f.Tensor(name)
		if tn == nil {
			t.Errorf("missing %s", name)
			continue
		}
		if tn.Type != w.typ || tn.Shape() != (&Tensor{Dims: w.dims}).Shape() {
			t.Errorf("%s: %s %s, want %s %v", name, tn.Type, tn.Shape(), w.typ, w.dims)
		}
	}
	if len(f.Tensors) != 3+2*9 {
		t.Errorf("%d tensors, want %d", len(f.Tensors), 3+2*9)
	}
	md := f.Metadata
	for key, want := range map[string]int64{
		"llama.block_count": 2, "llama.embedding_length": 64, "llama.feed_forward_length": 96,
		"llama.attention.head_count": 4, "llama.attention.head_count_kv": 2, "llama.rope.dimension_count": 16,
		"llama.vocab_size": 300, "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
		"general.file_type": 7,
	} {
		if got, ok := md.Int(key); !ok || got != want {
			t.Errorf("%s = %d (%v), want %d", key, got, ok, want)
		}
	}
	toks, _ := md.Array("tokenizer.ggml.tokens")
	types, _ := md.Array("tokenizer.ggml.token_type")
	ts := toks.Values.([]string)
	if len(ts) != 300 || ts[3] != "<0x00>" || ts[258] != "<0xFF>" || types.Values.([]int32)[3] != 6 {
		t.Errorf("vocab: %d tokens, [3]=%q [258]=%q", len(ts), ts[3], ts[258])
	}
	uniq := map[string]bool{}
	for _, s := range ts {
		if uniq[s] {
			t.Errorf("duplicate token %q", s)
		}
		uniq[s] = true
	}

	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Q8_0 blocks: every block's scale is the fixed d, quants vary.
	q := f.Tensor("blk.0.attn_q.weight")
	for off := q.FileOffset; off < q.End(); off += 34 {
		if d := binary.LittleEndian.Uint16(raw[off:]); d != q8Scale {
			t.Fatalf("block at %d: scale %#x, want %#x", off, d, q8Scale)
		}
	}
	norm := f.Tensor("output_norm.weight")
	for off := norm.FileOffset; off < norm.End(); off += 4 {
		if v := math.Float32frombits(binary.LittleEndian.Uint32(raw[off:])); v != 1 {
			t.Fatalf("norm weight %v, want 1", v)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("temporary file left behind: %v", entries)
	}
}

func TestSynthValuesAreSmall(t *testing.T) {
	for _, typ := range []Type{TypeF32, TypeF16, TypeBF16} {
		var b bytes.Buffer
		spec := SynthSpec{Layers: 1, Embd: 30, FF: 10, Heads: 3, Vocab: synthMinVocab, Type: typ}
		if _, err := WriteSynth(&b, spec); err != nil {
			t.Fatal(err)
		}
		raw := b.Bytes()
		f, err := parseBytes(raw)
		if err != nil {
			t.Fatal(err)
		}
		tn := f.Tensor("blk.0.ffn_down.weight")
		var neg, n int
		for off := tn.FileOffset; off < tn.End(); off += typ.TypeSize() {
			var v float32
			switch typ {
			case TypeF32:
				v = math.Float32frombits(binary.LittleEndian.Uint32(raw[off:]))
			case TypeF16:
				v = float16ToFloat32(binary.LittleEndian.Uint16(raw[off:]))
			case TypeBF16:
				v = math.Float32frombits(uint32(binary.LittleEndian.Uint16(raw[off:])) << 16)
			}
			if a := math.Abs(float64(v)); a < 1.0/128 || a >= 1.0/32 {
				t.Fatalf("%s: value %v at %d out of range", typ, v, off)
			}
			if v < 0 {
				neg++
			}
			n++
		}
		if neg < n/4 || neg > 3*n/4 {
			t.Errorf("%s: %d of %d negative", typ, neg, n)
		}
	}
}

func TestSynthIsDeterministicPerSeed(t *testing.T) {
	spec := SynthSpec{Layers: 1, Embd: 32, FF: 32, Heads: 2, Vocab: synthMinVocab, Type: TypeF16, Seed: 1}
	gen := func(s SynthSpec) []byte {
		var b bytes.Buffer
		if _, err := WriteSynth(&b, s); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := gen(spec), gen(spec)
	spec.Seed = 2
	c := gen(spec)
	if !bytes.Equal(a, b) {
		t.Error("same seed, different files")
	}
	if bytes.Equal(a, c) {
		t.Error("different seeds, same file")
	}
}

func TestSynthMoE(t *testing.T) {
	spec := SynthSpec{Layers: 2, Embd: 32, FF: 64, Heads: 2, Experts: 4, ExpertsUsed: 2, Vocab: synthMinVocab, Type: TypeQ8_0}
	f, err := spec.Layout()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"} {
		tn := f.Tensor(name)
		if tn == nil || len(tn.Dims) != 3 || tn.Dims[2] != 4 || tn.Experts != 4 {
			t.Fatalf("%s: %+v", name, tn)
		}
		ne0, ne1 := tn.Dims[0], tn.Dims[1]
		if want := ne0 / 32 * 34 * ne1; tn.ExpertSize != want {
			t.Errorf("%s: expert size %d, want %d", name, tn.ExpertSize, want)
		}
	}
	if d := f.Tensor("blk.0.ffn_down_exps.weight").Dims; d[0] != 64 || d[1] != 32 {
		t.Errorf("ffn_down_exps dims %v, want [64 32 4]", d)
	}
	if d := f.Tensor("blk.0.ffn_gate_inp.weight"); d.Type != TypeF32 || d.Shape() != "[32 4]" {
		t.Errorf("ffn_gate_inp %s %s", d.Type, d.Shape())
	}
	if n, _ := f.Metadata.Int("llama.expert_used_count"); n != 2 {
		t.Errorf("expert_used_count %d", n)
	}
}

func TestSynthRejectsBadShapes(t *testing.T) {
	for name, c := range map[string]struct {
		spec SynthSpec
		msg  string
	}{
		"heads not dividing": {SynthSpec{Embd: 100, Heads: 3}, "heads 3 must divide embd 100"},
		"odd head size":      {SynthSpec{Embd: 30, Heads: 10}, "must be even"},
		"kv heads":           {SynthSpec{Embd: 64, Heads: 4, KVHeads: 3}, "kv-heads 3"},
		"q8 embd":            {SynthSpec{Embd: 48, Heads: 2, Type: TypeQ8_0}, "multiple of 32"},
		"q8 ff":              {SynthSpec{Embd: 64, FF: 40, Type: TypeQ8_0}, "ff 40 must be a multiple of 32"},
		"vocab":              {SynthSpec{Vocab: 100}, "vocab 100"},
		"experts used":       {SynthSpec{Experts: 2, ExpertsUsed: 3}, "experts-used 3"},
		"type":               {SynthSpec{Type: TypeIQ4_XS}, "type IQ4_XS"},
		"q4_k embd":          {SynthSpec{Embd: 2880, Heads: 45, Type: TypeQ4_K}, "embd 2880 must be a multiple of 256 for Q4_K"},
		"q4_k head dims":     {SynthSpec{Embd: 256, FF: 512, Heads: 3, HeadDim: 64, Type: TypeQ4_K}, "heads × head size 192 must be a multiple of 256"},
		"mxfp4 dense":        {SynthSpec{Type: TypeMXFP4}, "type MXFP4 is for expert weights"},
		"skew dense":         {SynthSpec{RouterSkew: 1}, "router skew 1 without experts"},
		"skew nan":           {SynthSpec{Experts: 4, RouterSkew: math.NaN()}, "router skew NaN"},
	} {
		_, err := c.spec.Writer()
		if err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v, want one containing %q", name, err, c.msg)
		}
	}
}

func TestSizeSynthReachesTarget(t *testing.T) {
	for _, c := range []struct {
		target int64
		spec   SynthSpec
	}{
		{20 << 20, SynthSpec{Type: TypeF16}},
		{300 << 20, SynthSpec{Type: TypeF16}},
		{2 << 30, SynthSpec{Type: TypeQ8_0}},
		{64 << 30, SynthSpec{Type: TypeF16}},
		{500 << 20, SynthSpec{Type: TypeQ8_0, Experts: 8}},
		{100 << 20, SynthSpec{Type: TypeF32, Layers: 3}},
		{100 << 20, SynthSpec{Type: TypeF16, Embd: 512}},
		{100 << 20, SynthSpec{Type: TypeF16, Heads: 7}},
		{100 << 20, SynthSpec{Type: TypeF16, KVHeads: 5}},
		{100 << 20, SynthSpec{Type: TypeQ8_0, Heads: 6, KVHeads: 3}},
	} {
		s, err := SizeSynth(c.target, c.spec)
		if err != nil {
			t.Errorf("%d: %v", c.target, err)
			continue
		}
		f, err := s.Layout()
		if err != nil {
			t.Fatalf("%d: %+v: %v", c.target, s, err)
		}
		ratio := float64(f.Size) / float64(c.target)
		if ratio < 0.97 || ratio > 1.03 {
			t.Errorf("target %d: got %d (%.3f) with %+v", c.target, f.Size, ratio, s)
		}
		if c.spec.Layers != 0 && s.Layers != c.spec.Layers || c.spec.Embd != 0 && s.Embd != c.spec.Embd ||
			c.spec.Heads != 0 && s.Heads != c.spec.Heads || c.spec.KVHeads != 0 && s.KVHeads != c.spec.KVHeads {
			t.Errorf("fixed fields changed: %+v", s)
		}
		if s.Embd%s.Heads != 0 || s.Layers < 1 {
			t.Errorf("bad shape %+v", s)
		}
		t.Logf("target %d MiB: layers %d embd %d ff %d heads %d → %d MiB", c.target>>20, s.Layers, s.Embd, s.FF, s.Heads, f.Size>>20)
	}
	if _, err := SizeSynth(1000, SynthSpec{}); err == nil {
		t.Error("1000-byte model: no error")
	}
}

func TestFloat16RoundTrip(t *testing.T) {
	for h := 0; h < 1<<16; h++ {
		f := float16ToFloat32(uint16(h))
		if f != f { // NaN
			continue
		}
		if back := float32ToFloat16(f); back != uint16(h) {
			t.Fatalf("%#04x → %v → %#04x", h, f, back)
		}
	}
	for _, c := range []struct {
		f float32
		h uint16
	}{{1, 0x3c00}, {-2, 0xc000}, {65504, 0x7bff}, {1e6, 0x7c00}, {5.960464477539063e-08, 0x0001}, {1e-9, 0}, {0.1, 0x2e66}} {
		if got := float32ToFloat16(c.f); got != c.h {
			t.Errorf("%v → %#04x, want %#04x", c.f, got, c.h)
		}
	}
}

// TestSynthArchsWriteWhatTheirLoaderRequires lists, per architecture, the
// tensors of a layer and the hyperparameters llama.cpp's loader of that
// architecture reads (src/models/<arch>.cpp of the shipped source):
// a tensor too many or too few and llama.cpp refuses the model.
func TestSynthArchsWriteWhatTheirLoaderRequires(t *testing.T) {
	common := []string{"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
		"ffn_gate_inp.weight", "ffn_gate_exps.weight", "ffn_down_exps.weight", "ffn_up_exps.weight"}
	tests := []struct {
		arch    string
		layer   []string // besides common
		keys    []string // besides the llama ones
		experts map[string]string
	}{
		{ArchLlama, []string{"ffn_norm.weight"}, nil, nil},
		{ArchQwen3MoE, []string{"ffn_norm.weight", "attn_q_norm.weight", "attn_k_norm.weight"},
			[]string{"expert_feed_forward_length", "attention.key_length", "attention.value_length"}, nil},
		{ArchQwen2MoE, []string{"ffn_norm.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias",
			"ffn_gate_inp_shexp.weight", "ffn_gate_shexp.weight", "ffn_down_shexp.weight", "ffn_up_shexp.weight"},
			[]string{"expert_feed_forward_length", "expert_shared_feed_forward_length"}, nil},
		{ArchGPTOSS, []string{"post_attention_norm.weight", "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias",
			"attn_sinks.weight", "ffn_gate_inp.bias", "ffn_gate_exps.bias", "ffn_down_exps.bias", "ffn_up_exps.bias"},
			[]string{"expert_feed_forward_length", "attention.sliding_window", "attention.key_length"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.arch, func(t *testing.T) {
			spec := SynthSpec{Arch: tc.arch, Layers: 2, Embd: 64, FF: 32, Heads: 4, KVHeads: 2, Experts: 4, ExpertsUsed: 2, Vocab: synthMinVocab, Type: TypeBF16}
			f, err := spec.Layout()
			if err != nil {
				t.Fatal(err)
			}
			var got, want []string
			for _, tn := range f.Tensors {
				if tn.Layer == 1 {
					got = append(got, strings.TrimPrefix(tn.Name, "blk.1."))
				}
			}
			want = append(append(want, common...), tc.layer...)
			slices.Sort(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("layer tensors %v, want %v", got, want)
			}
			if a, _ := f.Metadata.String("general.architecture"); a != tc.arch {
				t.Errorf("general.architecture %q", a)
			}
			for _, k := range append([]string{"block_count", "embedding_length", "expert_count", "expert_used_count", "attention.head_count_kv"}, tc.keys...) {
				if _, ok := f.Metadata.Int(tc.arch + "." + k); !ok {
					t.Errorf("no %s.%s", tc.arch, k)
				}
			}
			// Every expert-indexed tensor, weight or bias, is split along its
			// last dimension; shared-expert tensors are not split at all.
			for _, tn := range f.Tensors {
				exps := strings.HasSuffix(tn.Role, "_exps")
				if exps != (tn.Experts == 4) || (exps && tn.ExpertSize*4 != tn.Size) {
					t.Errorf("%s %s: %d experts of %d bytes", tn.Name, tn.Shape(), tn.Experts, tn.ExpertSize)
				}
			}
		})
	}
}

func TestSynthRejectsADenseModelOfAnMoEArch(t *testing.T) {
	for _, c := range []struct {
		spec SynthSpec
		msg  string
	}{
		{SynthSpec{Arch: ArchQwen3MoE}, "arch qwen3moe is mixture-of-experts only"},
		{SynthSpec{Arch: ArchGPTOSS}, "arch gpt-oss is mixture-of-experts only"},
		{SynthSpec{Arch: "mixtral", Experts: 4}, `arch "mixtral": want one of llama, qwen3moe, qwen2moe, gpt-oss`},
	} {
		if _, err := c.spec.Writer(); err == nil || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%+v: error %v, want %q", c.spec, err, c.msg)
		}
	}
}
