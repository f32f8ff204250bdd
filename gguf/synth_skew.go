package gguf

import (
	"math"
	"strings"
)

// A router skew makes a few experts hot, as in real MoE models, where
// random weights route near uniformly. Top-k routing picks the largest
// logits; a logit is the router row's dot product with the normalized
// hidden state, so a bias needs a hidden-state component that is the
// same for every token. The model gets one:
//
//   - element 0 of every token's embedding is c, the embedding values'
//     own RMS m: after RMSNorm it is about 1 (the other n-1 elements share
//     the remaining n-1 of the squared norm);
//   - every tensor that writes into the residual stream (attn_output,
//     ffn_down, ffn_down_exps, ffn_down_shexp, their biases) is zero, so
//     the residual is the embedding in every layer: element 0 stays c and
//     the rest stays a function of the token, as random as the embedding;
//   - element 0 of expert e's router row is its bias, in units of the
//     router's noise (the row's other elements against the hidden state's,
//     σ = rms_w·√(n−1)); gpt-oss's router bias is zero.
//
// Expert of rank r (0 the hottest; ranks are a per-layer permutation of
// the experts drawn from the seed) gets bias −S·ln(1+r)·√6/π σ: with
// Gumbel noise of that variance top-1 shares would follow Zipf's law
// (1+r)^−S; with the near-Gaussian noise here they come close
// (SynthRouterShares simulates the exact top-k). Every expert is still
// read in full when picked: only the values change, not the I/O.

// synthSkew is what a router skew writes.
type synthSkew struct {
	spec  SynthSpec
	embd0 float32 // element 0 of every token_embd row, before rounding
	// sigma is the router logits' noise in the router's units, divided by
	// element 0 after RMSNorm: a bias of b noise units is weight b·sigma.
	sigma float64
}

func newSynthSkew(s SynthSpec) *synthSkew {
	if s.RouterSkew == 0 || s.Experts == 0 {
		return nil
	}
	et := s.weightType("token_embd")
	m := synthRMS(et)
	// The value a block of et holds nearest m: after RMSNorm element 0 is
	// about c/m, which the router's weight there divides out.
	blk := make([]byte, et.TypeSize())
	fillBlocks(et, blk, &rng{s: 1})
	setElem0(et, blk, float32(m))
	vals, err := dequantize(et, blk)
	if err != nil || vals[0] <= 0 {
		return nil // Validate admits no such type
	}
	return &synthSkew{
		spec:  s,
		embd0: float32(m),
		sigma: synthRMS(TypeF32) * math.Sqrt(float64(s.Embd-1)) * m / float64(vals[0]),
	}
}

// gumbelScale is the scale of a Gumbel distribution whose variance is 1.
var gumbelScale = math.Sqrt(6) / math.Pi

// SynthRouterRanks returns layer's experts, hottest first, as a router
// skew orders them (nil without one).
func (s SynthSpec) SynthRouterRanks(layer int) []int {
	s = s.WithDefaults()
	if s.RouterSkew == 0 || s.Experts == 0 {
		return nil
	}
	r := rng{s: s.Seed*0x9e3779b97f4a7c15 ^ uint64(layer+1)*0xd1b54a32d192ed03}
	perm := make([]int, s.Experts)
	for i := range perm {
		perm[i] = i
	}
	for i := len(perm) - 1; i > 0; i-- {
		j := int(r.next() % uint64(i+1))
		perm[i], perm[j] = perm[j], perm[i]
	}
	return perm
}

// routerBias is the logit bias of the expert of rank r, in noise units.
func routerBias(skew float64, r int) float64 {
	return -skew * math.Log1p(float64(r)) * gumbelScale
}

// SynthRouterShares is each rank's expected share of the picks under a
// router skew (index 0 the hottest), from a Monte Carlo of top-k over
// the biased logits with unit Gaussian noise (the hidden state's many
// random elements make the noise near Gaussian): the oracle a run's
// picks are checked against.
func SynthRouterShares(skew float64, experts, used, draws int, seed uint64) []float64 {
	r := rng{s: seed + 1}
	normal := func() float64 { // Box–Muller over two uniforms
		u1 := (float64(r.next()>>11) + 0.5) / (1 << 53)
		u2 := float64(r.next()>>11) / (1 << 53)
		return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
	}
	counts := make([]float64, experts)
	logit := make([]float64, experts)
	top := make([]int, 0, used)
	for range draws {
		for e := range logit {
			logit[e] = routerBias(skew, e) + normal()
		}
		top = top[:0]
		for range used {
			best := -1
			for e, v := range logit {
				if best < 0 || v > logit[best] {
					best = e
				}
			}
			top = append(top, best)
			logit[best] = math.Inf(-1)
		}
		for _, e := range top {
			counts[e]++
		}
	}
	for e := range counts {
		counts[e] /= float64(draws * used)
	}
	return counts
}

// residualWriter reports whether a tensor of this role adds into the
// residual stream.
func residualWriter(role string) bool {
	switch role {
	case "attn_output", "ffn_down", "ffn_down_exps", "ffn_down_shexp":
		return true
	}
	return false
}

// zero reports whether the skew writes t as zeros (valid zeros in every
// type: a zero scale or a zero value).
func (k *synthSkew) zero(t *Tensor) bool {
	return residualWriter(t.Role) || (t.Role == "ffn_gate_inp" && strings.HasSuffix(t.Name, ".bias"))
}

// patch rewrites, in the chunk b at byte off of tensor t, the elements the
// skew sets: element 0 of every embedding row and of every router row.
func (k *synthSkew) patch(t *Tensor, b []byte, off int64) {
	switch {
	case t.Role == "token_embd":
		k.setRowStarts(t, b, off, func(int64) float32 { return k.embd0 })
	case t.Role == "ffn_gate_inp" && strings.HasSuffix(t.Name, ".weight"):
		ranks := k.spec.SynthRouterRanks(t.Layer)
		rank := make([]int, len(ranks))
		for r, e := range ranks {
			rank[e] = r
		}
		// The embedding's element 0 normalizes to about 1, so the router
		// weight there is the bias itself.
		k.setRowStarts(t, b, off, func(row int64) float32 {
			return float32(routerBias(k.spec.RouterSkew, rank[row]) * k.sigma)
		})
	}
}

// setRowStarts sets element 0 of each row of t that starts in b.
func (k *synthSkew) setRowStarts(t *Tensor, b []byte, off int64, v func(row int64) float32) {
	rowBytes, err := t.Type.RowSize(t.Dims[0])
	if err != nil || rowBytes == 0 {
		return
	}
	for row := (off + rowBytes - 1) / rowBytes; row*rowBytes < off+int64(len(b)); row++ {
		setElem0(t.Type, b[row*rowBytes-off:], v(row))
	}
}

// synthRMS is the RMS of the values synth writes in weights of type t,
// measured on a sample of its own output.
func synthRMS(t Type) float64 {
	const n = 1 << 14
	size := n / t.BlockSize() * t.TypeSize()
	var b strings.Builder
	buf := make([]byte, synthChunk)
	if err := synthData(&b, &Tensor{Type: t, Size: size, Role: "sample"}, 1, buf, nil); err != nil {
		return math.NaN()
	}
	vals, err := dequantize(t, []byte(b.String()))
	if err != nil {
		return math.NaN()
	}
	var sum float64
	for _, v := range vals {
		sum += float64(v) * float64(v)
	}
	return math.Sqrt(sum / float64(len(vals)))
}
