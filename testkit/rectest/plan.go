package rectest

import "github.com/iocorr/iocorr/testkit/llmtest"

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
	pick := llmtest.SkewedPicks(experts, used, seed)
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
