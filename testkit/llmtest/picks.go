package llmtest

import (
	"math/rand/v2"
	"slices"
)

// SkewedPicks gives, call after call, `used` distinct experts of
// `experts`, ascending, the low ids far more often, as a trained router's
// hot experts are; the same seed gives the same picks.
func SkewedPicks(experts, used int, seed uint64) func() []int {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func() []int {
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
}
