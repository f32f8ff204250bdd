package gguf_test

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

func TestSynthRouterSharesFallOffWithRank(t *testing.T) {
	for _, c := range []struct {
		skew           float64
		experts, used  int
		hottestAtLeast float64 // the hottest rank's share, over the uniform 1/experts
	}{
		{0, 8, 2, 0},
		{1, 8, 2, 1.5},
		{2, 8, 2, 2.5},
		{1.5, 128, 8, 4},
	} {
		t.Run(fmt.Sprintf("S=%g %d of %d", c.skew, c.used, c.experts), func(t *testing.T) {
			shares := gguf.SynthRouterShares(c.skew, c.experts, c.used, 20000, 1)
			uniform := 1 / float64(c.experts)
			sum := 0.0
			for r, s := range shares {
				sum += s
				if c.skew == 0 && math.Abs(s-uniform) > 0.1*uniform {
					t.Errorf("rank %d: share %.4f without skew, want about %.4f", r, s, uniform)
				}
			}
			if math.Abs(sum-1) > 1e-9 {
				t.Errorf("shares sum to %v", sum)
			}
			if c.skew > 0 {
				if shares[0] < c.hottestAtLeast*uniform {
					t.Errorf("hottest share %.3f, want at least %.1f × uniform %.4f", shares[0], c.hottestAtLeast, uniform)
				}
				if last := shares[len(shares)-1]; last >= uniform || last >= shares[0] {
					t.Errorf("coldest share %.4f, hottest %.4f: not below uniform %.4f", last, shares[0], uniform)
				}
			}
		})
	}
}

func TestSynthRouterRanksArePerLayerPermutations(t *testing.T) {
	spec := gguf.SynthSpec{Arch: gguf.ArchQwen3MoE, Experts: 16, ExpertsUsed: 2, RouterSkew: 1, Seed: 3}
	a, b := spec.SynthRouterRanks(0), spec.SynthRouterRanks(1)
	for _, ranks := range [][]int{a, b} {
		seen := map[int]bool{}
		for _, e := range ranks {
			if e < 0 || e >= 16 || seen[e] {
				t.Fatalf("ranks %v: not a permutation of 16 experts", ranks)
			}
			seen[e] = true
		}
	}
	if fmt.Sprint(a) == fmt.Sprint(b) {
		t.Errorf("layers 0 and 1 rank the experts alike: %v", a)
	}
	spec.RouterSkew = 0
	if r := spec.SynthRouterRanks(0); r != nil {
		t.Errorf("ranks %v without a skew", r)
	}
}

// skewPrompt is ~200 tokens of pseudo-random words: a prefill of many
// distinct tokens, each an independent draw of each layer's router.
func skewPrompt() string {
	var b strings.Builder
	x := uint32(12345)
	for b.Len() < 600 {
		x = x*1664525 + 1013904223
		n := 1 + int(x>>28)%5
		for range n {
			x = x*1664525 + 1013904223
			b.WriteByte(byte('a' + (x>>24)%26))
		}
		b.WriteByte(' ')
	}
	return b.String()
}

// TestSynthRouterSkewShowsInLlamaCppsPicks runs llama.cpp's own router
// (the routing oracle, through its graph callback) on skewed synth
// models and checks the picks per expert, ranked as the skew ranked the
// experts, against the shares the skew's Monte Carlo expects.
func TestSynthRouterSkewShowsInLlamaCppsPicks(t *testing.T) {
	oracle := llmtest.BuildRouteOracle(t)
	const skew = 1.5
	for _, spec := range []gguf.SynthSpec{
		{Arch: gguf.ArchQwen3MoE, Layers: 8, Embd: 256, FF: 128, Heads: 4, KVHeads: 2, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeBF16, RouterSkew: skew},
		{Arch: gguf.ArchGPTOSS, Layers: 8, Embd: 256, FF: 128, Heads: 4, KVHeads: 2, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeQ8_0, RouterSkew: skew},
		{Arch: gguf.ArchLlama, Layers: 8, Embd: 256, FF: 128, Heads: 4, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeF16, RouterSkew: skew},
		{Arch: gguf.ArchQwen3MoE, Layers: 8, Embd: 256, FF: 256, Heads: 4, KVHeads: 2, HeadDim: 128, Experts: 8, ExpertsUsed: 2, Type: gguf.TypeQ4_K, RouterSkew: skew},
	} {
		t.Run(fmt.Sprintf("%s %s", spec.Arch, spec.Type), func(t *testing.T) {
			model := llmtest.Model(t, spec)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			args := append(llmtest.RouteOracleArgs(oracle, model, 8, true), "-c", "512", "-p", skewPrompt())
			var stderr strings.Builder
			cmd := exec.CommandContext(ctx, args[0], args[1:]...)
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("routeoracle: %v\n%s", err, stderr.String())
			}
			routing, err := llmtest.ParseRouting(out)
			if err != nil {
				t.Fatal(err)
			}
			byRank := make([]float64, spec.Experts)
			total := 0.0
			for _, call := range routing.Calls {
				for layer, rows := range call.Rows {
					rank := make([]int, spec.Experts)
					for r, e := range spec.SynthRouterRanks(layer) {
						rank[e] = r
					}
					for _, row := range rows {
						for _, e := range row {
							byRank[rank[e]]++
							total++
						}
					}
				}
			}
			want := gguf.SynthRouterShares(skew, spec.Experts, spec.ExpertsUsed, 100000, 1)
			tv := 0.0
			for r := range byRank {
				byRank[r] /= total
				tv += math.Abs(byRank[r]-want[r]) / 2
			}
			t.Logf("%.0f picks; shares by rank %.3f, expected %.3f; total variation %.3f", total, byRank, want, tv)
			if total < 1000 {
				t.Fatalf("%.0f picks: the prompt did not route", total)
			}
			if tv > 0.1 {
				t.Errorf("picks by rank %.3f, want about %.3f (total variation %.3f > 0.1)", byRank, want, tv)
			}
			if hot, uniform := byRank[0], 1/float64(spec.Experts); hot < 1.5*uniform {
				t.Errorf("hottest expert took %.3f of the picks, want ≥ 1.5 × uniform %.3f", hot, uniform)
			}
		})
	}
}
