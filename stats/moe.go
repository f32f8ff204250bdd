package stats

import (
	"cmp"
	"math"
	"slices"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
)

const naNoMoE = "no MoE layers: the run's models have no *_exps tensors"
const naNoPicks = "no router picks were recorded in decode tokens"

// moeLayer is what the simulations need about one MoE layer.
type moeLayer struct {
	layer      int
	experts    int
	sliceBytes int64   // one expert's bytes over all the layer's *_exps tensors
	seq        []int   // decode picks, token by token, experts ascending
	tokens     [][]int // the picks of each decode token (with picks) in order
}

func (r *run) moeLayers() []moeLayer {
	exps := r.expsByLayer()
	var out []moeLayer
	for l, ids := range exps {
		ml := moeLayer{layer: l}
		for _, id := range ids {
			t := &r.st.Tensors[id]
			ml.experts = max(ml.experts, t.Experts)
			ml.sliceBytes += t.ExpertStride
		}
		out = append(out, ml)
	}
	slices.SortFunc(out, func(a, b moeLayer) int { return cmp.Compare(a.layer, b.layer) })
	sels := slices.Clone(r.sels)
	slices.SortFunc(sels, func(a, b event.ExpertSel) int {
		return cmp.Or(cmp.Compare(a.Token, b.Token), cmp.Compare(a.Layer, b.Layer), cmp.Compare(a.Expert, b.Expert))
	})
	for i := range out {
		ml := &out[i]
		last := uint32(math.MaxUint32)
		for _, s := range sels {
			if int(s.Layer) != ml.layer || r.phaseOf[s.Token] != event.PhaseDecode {
				continue
			}
			if s.Token != last {
				ml.tokens = append(ml.tokens, nil)
				last = s.Token
			}
			ml.seq = append(ml.seq, int(s.Expert))
			ml.tokens[len(ml.tokens)-1] = append(ml.tokens[len(ml.tokens)-1], int(s.Expert))
		}
	}
	return out
}

var policies = []struct {
	name string
	sim  func([]int, int) []bool
}{{"lru", LRU}, {"lfu", LFU}, {"belady", Belady}}

// The kinds of a reuse_distance row: a pick of an expert picked before
// in the layer, at a distance, or its first pick, at none.
const (
	ReuseKindReuse = "reuse"
	ReuseKindFirst = "first use"
)

func (r *run) moe() []Table {
	act := Table{Name: "expert_activations", Title: "activation matrix: how often the router picked each expert, by phase", Long: true,
		Columns: cols("siii", "phase", "layer", "expert", "activations")}
	routing := Table{Name: "routing", Title: "per MoE layer: routing entropy, token-to-token overlap, real hit rate (decode)",
		Columns: cols("iiiffff", "layer", "experts", "decode_activations", "routing_entropy_bits", "routing_entropy_normalized_ratio", "token_overlap_ratio", "real_hit_rate_ratio")}
	reuse := Table{Name: "reuse_distance", Title: "reuse distance (distinct experts of the layer between two picks of one expert), decode, all MoE layers",
		Columns: cols("skif", "kind", "distance_experts", "activations", "cdf_ratio")}
	simL := Table{Name: "cache_sim_layers", Title: "expert-cache simulation per layer, decode", Long: true,
		Columns: cols("isifff", "layer", "policy", "k_experts", "hit_rate_ratio", "hit_rate_after_warmup_ratio", "bytes_read_per_token_bytes")}
	sim := Table{Name: "cache_sim", Title: "expert-cache simulation, all MoE layers, decode: K experts per layer, or one byte budget shared; the real run beside them",
		Columns: cols("sifiifff", "policy", "k_experts", "budget_bytes", "capacity_experts", "activations", "hit_rate_ratio", "hit_rate_after_warmup_ratio", "bytes_read_per_token_bytes")}
	layers := r.moeLayers()
	if len(layers) == 0 {
		routing.add(NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE))
		sim.add(Str("real"), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE), NA(naNoMoE))
		return []Table{act, routing, reuse, simL, sim}
	}
	// Activation matrix, from the router's counts (a prefill call counts
	// each of its tokens' picks).
	type ck struct {
		phase string
		l, e  int
	}
	counts := map[ck]uint64{}
	for _, s := range r.sels {
		p := event.PhaseName(r.phaseOf[s.Token])
		counts[ck{p, int(s.Layer), int(s.Expert)}] += s.Count
	}
	for _, p := range []string{"prefill", "decode"} {
		for _, ml := range layers {
			why := r.picksNA(p, ml.layer)
			for e := range ml.experts {
				v := I64(counts[ck{p, ml.layer, e}])
				if why != "" {
					v = NA(why)
				}
				act.add(Str(p), I64(ml.layer), I64(e), v)
			}
		}
	}
	// Routing.
	tokens := float64(r.decodeTok)
	for _, ml := range layers {
		c := make([]float64, ml.experts)
		var n uint64
		for e := range c {
			v := counts[ck{"decode", ml.layer, e}]
			c[e], n = float64(v), n+v
		}
		ent := EntropyBits(c)
		var ov []float64
		for i := 1; i < len(ml.tokens); i++ {
			ov = append(ov, Overlap(ml.tokens[i-1], ml.tokens[i]))
		}
		row := []Value{I64(ml.layer), I64(ml.experts), I64(n)}
		if why := r.picksNA("decode", ml.layer); why != "" {
			row = append(row[:2], NA(why), NA(why), NA(why))
		} else if n == 0 {
			row = append(row, NA(naNoPicks), NA(naNoPicks))
		} else {
			row = append(row, F64(ent, ""), ratio(ent, math.Log2(float64(ml.experts)), "a layer of one expert has no routing choice"))
		}
		if len(ov) == 0 {
			row = append(row, NA("fewer than two decode tokens with picks"))
		} else {
			row = append(row, F64(Summarize(ov).Mean, ""))
		}
		row = append(row, r.realHitRate(ml.layer))
		routing.add(row...)
	}
	// Reuse distances, summed over layers.
	hist := map[int]int{}
	total := 0
	for _, ml := range layers {
		for _, d := range ReuseDistances(ml.seq) {
			hist[d]++
			total++
		}
	}
	var ds []int
	for d := range hist {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	cum := 0
	for _, d := range ds {
		cum += hist[d]
		// A first pick has no distance (none, not unmeasured): kind says
		// so, and the distance column stays an integer one.
		kind := ReuseKindReuse
		if d < 0 {
			kind = ReuseKindFirst
		}
		reuse.add(Str(kind), I64(d), I64(hist[d]), F64(float64(cum)/float64(total), ""))
	}
	// Per-layer simulations and their sums per K.
	maxE := 0
	for _, ml := range layers {
		maxE = max(maxE, ml.experts)
	}
	ks := r.opt.K
	if ks == nil {
		for k := 1; k <= maxE; k++ {
			ks = append(ks, k)
		}
	}
	for _, p := range policies {
		for _, k := range ks {
			var hits, n, cold int
			var missBytes float64
			for _, ml := range layers {
				h := CountTrue(p.sim(ml.seq, min(k, ml.experts)))
				d := Distinct(ml.seq)
				hits, n, cold = hits+h, n+len(ml.seq), cold+d
				mb := float64(len(ml.seq)-h) * float64(ml.sliceBytes)
				missBytes += mb
				simL.add(I64(ml.layer), Str(p.name), I64(k), ratio(float64(h), float64(len(ml.seq)), naNoPicks),
					ratio(float64(h), float64(len(ml.seq)-d), "every pick was a first use"), ratio(mb, tokens, naNoTokens))
			}
			sim.add(Str(p.name), I64(k), NA("per-layer cache of K experts"), I64(k*len(layers)), I64(n),
				ratio(float64(hits), float64(n), naNoPicks), ratio(float64(hits), float64(n-cold), "every pick was a first use"), ratio(missBytes, tokens, naNoTokens))
		}
	}
	// Byte budgets: one cache over every (layer, expert) slice, in pick
	// order across layers, holding as many slices as fit.
	var gseq []int
	var gbytes []int64
	var maxSlice int64
	for _, ml := range layers {
		maxSlice = max(maxSlice, ml.sliceBytes)
	}
	{
		type pick struct{ tok, layer, e int }
		var ps []pick
		for li, ml := range layers {
			for ti, tk := range ml.tokens {
				for _, e := range tk {
					ps = append(ps, pick{ti, li, e})
				}
			}
		}
		slices.SortStableFunc(ps, func(a, b pick) int { return cmp.Or(cmp.Compare(a.tok, b.tok), cmp.Compare(a.layer, b.layer)) })
		for _, p := range ps {
			gseq = append(gseq, p.layer*maxE+p.e)
			gbytes = append(gbytes, layers[p.layer].sliceBytes)
		}
	}
	for _, b := range r.opt.Budgets {
		capN := 0
		if maxSlice > 0 {
			capN = int(b / maxSlice)
		}
		for _, p := range policies {
			h := p.sim(gseq, capN)
			var miss float64
			for i, hit := range h {
				if !hit {
					miss += float64(gbytes[i])
				}
			}
			nh, d := CountTrue(h), Distinct(gseq)
			sim.add(Str(p.name), NA("one cache for all layers"), F64(float64(b), ""), I64(capN), I64(len(gseq)),
				ratio(float64(nh), float64(len(gseq)), naNoPicks), ratio(float64(nh), float64(len(gseq)-d), "every pick was a first use"), ratio(miss, tokens, naNoTokens))
		}
	}
	// The real run: picks whose slice was resident at the token's start,
	// and the device bytes its *_exps tensors read per decode token.
	var rb float64
	for _, ml := range layers {
		rb += float64(r.expsReadDecode[ml.layer])
	}
	sim.add(Str("real"), NA("the run's page cache"), NA("the run's page cache"), NA("the run's page cache"), I64(len(gseq)),
		r.realHitRate(-1), NA("the real run's first uses are not separable from its hits"), ratio(rb, tokens, naNoTokens))
	return []Table{act, routing, reuse, simL, sim}
}

// realHitRate is the decode share of picks whose expert slice was wholly
// in the page cache at the start of the token (the router's pick time
// itself is not recorded; a layer's earlier reads in that token may still
// evict it). Layer -1 is every layer.
func (r *run) realHitRate(layer int) Value {
	if r.realNA != "" {
		return NA(r.realNA)
	}
	h := r.realHits[[2]int{layer, int(event.PhaseDecode)}]
	if h == nil || h[1] == 0 {
		if r.snapshotNA != "" {
			return NA(r.snapshotNA)
		}
		return NA(naNoPicks + " (or no token start times)")
	}
	return F64(float64(h[0])/float64(h[1]), "")
}

// picksNA says why the router's picks of layer in phase are not all
// known ("" when they are): unseen in some of the phase's calls, or
// run-wide (store.Summary.PicksNAOf).
func (r *run) picksNA(phase string, layer int) string {
	return r.st.Summary.PicksNAOf(&store.Query{Phase: phase, Layer: &layer})
}
