package rectest

import (
	"math/rand/v2"
	"slices"
)

// MoEPlan is a scripted router: the picks of each decode token per layer,
// experts ascending (the order iocorr stats simulates caches in).
type MoEPlan struct {
	Layers, Experts, Used int
	Prefill               [][]int   // by layer: the picks of the prefill batch's rows
	Decode                [][][]int // by token, by layer
}

// SkewedPlan picks `used` distinct experts per layer and token, the low
// ids far more often, as a trained router's hot experts are.
func SkewedPlan(layers, experts, used, tokens int, seed uint64) MoEPlan {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	pick := func() []int {
		var ps []int
		for len(ps) < used {
			e := min(int(r.ExpFloat64()*float64(experts)/4), experts-1)
			if !slices.Contains(ps, e) {
				ps = append(ps, e)
			}
		}
		slices.Sort(ps)
		return ps
	}
	p := MoEPlan{Layers: layers, Experts: experts, Used: used}
	for range layers {
		p.Prefill = append(p.Prefill, pick())
	}
	for range tokens {
		var tok [][]int
		for range layers {
			tok = append(tok, pick())
		}
		p.Decode = append(p.Decode, tok)
	}
	return p
}

// Seq is the decode picks of one layer, token after token.
func (p MoEPlan) Seq(layer int) []int {
	var s []int
	for _, tok := range p.Decode {
		s = append(s, tok[layer]...)
	}
	return s
}
