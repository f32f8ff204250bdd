package gguf

import (
	"testing"
)

// TestSynthLikeSizesAreThoseOfTheReleasedModels checks the full-size
// shapes against what their released quantizations weigh and hold: the
// parameter counts of the model cards (30.5 B for Qwen3-30B-A3B, 20.9 B
// for gpt-oss-20b) and the slices a study's routing spans.
func TestSynthLikeSizesAreThoseOfTheReleasedModels(t *testing.T) {
	for _, c := range []struct {
		like           string
		paramsB        float64 // billions, from the model card
		minGiB, maxGiB float64
		expertSlices   int // expert tensors × experts
	}{
		{"qwen3-30b-a3b", 30.5, 15.5, 17.5, 48 * 3 * 128},
		{"gpt-oss-20b", 20.9, 11, 13.5, 24 * 6 * 32},
	} {
		t.Run(c.like, func(t *testing.T) {
			s, err := SynthLike(c.like)
			if err != nil {
				t.Fatal(err)
			}
			f, err := s.Layout()
			if err != nil {
				t.Fatal(err)
			}
			var params int64
			slices := 0
			for _, tn := range f.Tensors {
				params += tn.Elements()
				slices += tn.Experts
			}
			if got := float64(params) / 1e9; got < 0.97*c.paramsB || got > 1.03*c.paramsB {
				t.Errorf("%.2f B parameters, the model card says %.1f B", got, c.paramsB)
			}
			if gib := float64(f.Size) / (1 << 30); gib < c.minGiB || gib > c.maxGiB {
				t.Errorf("%.2f GiB, want %.1f–%.1f", gib, c.minGiB, c.maxGiB)
			}
			if slices != c.expertSlices {
				t.Errorf("%d expert slices, want %d", slices, c.expertSlices)
			}
			t.Logf("%s: %d tensors, %.2f B parameters, %.2f GiB", c.like, len(f.Tensors), float64(params)/1e9, float64(f.Size)/(1<<30))
		})
	}
	if _, err := SynthLike("llama-7b"); err == nil {
		t.Error("an unknown shape: no error")
	}
}

func TestResolveLikeKeepsTheFieldsGiven(t *testing.T) {
	for _, c := range []struct {
		name string
		o    SynthOptions
		want SynthSpec // the fields checked
	}{
		{"the shape and its type", SynthOptions{Like: "qwen3-30b-a3b", Type: "f16"},
			SynthSpec{Layers: 48, Embd: 2048, HeadDim: 128, Experts: 128, ExpertsUsed: 8, Type: TypeQ4_K}},
		{"layers and type given", SynthOptions{Like: "QWEN3-30B-A3B", Type: "q6_k", Spec: SynthSpec{Layers: 2, RouterSkew: 1}, Given: givenOnly("layers", "type")},
			SynthSpec{Layers: 2, Embd: 2048, HeadDim: 128, Experts: 128, ExpertsUsed: 8, Type: TypeQ6_K, RouterSkew: 1}},
		{"experts given", SynthOptions{Like: "gpt-oss-20b", Type: "f16", Spec: SynthSpec{Experts: 8, ExpertsUsed: 2}, Given: givenOnly("experts", "experts-used")},
			SynthSpec{Layers: 24, Embd: 2880, HeadDim: 64, Experts: 8, ExpertsUsed: 2, Type: TypeMXFP4}},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := c.o.Resolve()
			if err != nil {
				t.Fatal(err)
			}
			got := SynthSpec{Layers: s.Layers, Embd: s.Embd, HeadDim: s.HeadDim, Experts: s.Experts, ExpertsUsed: s.ExpertsUsed, Type: s.Type, RouterSkew: s.RouterSkew}
			if got != c.want {
				t.Errorf("resolved %+v, want %+v", got, c.want)
			}
		})
	}
}
