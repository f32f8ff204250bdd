package stats

import (
	"math"
	"slices"

	"gonum.org/v1/gonum/stat"
)

// Dist summarises a per-token figure.
type Dist struct {
	N                        int
	Mean, P50, P90, P99, Max float64
}

// Summarize computes the distribution of xs; quantiles are empirical (the
// smallest value whose share of values at or below it reaches p), so every
// quantile is a value that occurred.
func Summarize(xs []float64) Dist {
	d := Dist{N: len(xs)}
	if len(xs) == 0 {
		return d
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	d.Mean = stat.Mean(s, nil)
	d.P50 = stat.Quantile(0.50, stat.Empirical, s, nil)
	d.P90 = stat.Quantile(0.90, stat.Empirical, s, nil)
	d.P99 = stat.Quantile(0.99, stat.Empirical, s, nil)
	d.Max = s[len(s)-1]
	return d
}

// EntropyBits is the Shannon entropy, in bits, of the distribution that
// counts describe; 0 for no counts.
func EntropyBits(counts []float64) float64 {
	var total float64
	for _, c := range counts {
		total += c
	}
	if total == 0 {
		return 0
	}
	p := make([]float64, len(counts))
	for i, c := range counts {
		p[i] = c / total
	}
	return stat.Entropy(p) / math.Ln2
}

// Overlap is |cur ∩ prev| ÷ |cur|: the share of this token's experts the
// previous token used too; NaN when cur is empty.
func Overlap(prev, cur []int) float64 {
	if len(cur) == 0 {
		return math.NaN()
	}
	in := map[int]bool{}
	for _, x := range prev {
		in[x] = true
	}
	n := 0
	for _, x := range cur {
		if in[x] {
			n++
		}
	}
	return float64(n) / float64(len(cur))
}

// UnionNS is the length of the union of the intervals [s, e) clipped to
// [lo, hi): wall time during which at least one interval was open.
func UnionNS(iv [][2]uint64, lo, hi uint64) uint64 {
	var c [][2]uint64
	for _, x := range iv {
		s, e := max(x[0], lo), min(x[1], hi)
		if s < e {
			c = append(c, [2]uint64{s, e})
		}
	}
	slices.SortFunc(c, func(a, b [2]uint64) int {
		switch {
		case a[0] < b[0]:
			return -1
		case a[0] > b[0]:
			return 1
		}
		return 0
	})
	u := union{lo: lo, hi: hi}
	for _, x := range c {
		u.add(x[0], x[1])
	}
	return u.total
}

// union sums the union of intervals given in order of their starts,
// clipped to [lo, hi), holding only the end so far: the stall of a token
// is summed as its faults stream by, however many it has.
type union struct {
	lo, hi     uint64
	total, end uint64
}

func (u *union) add(s, e uint64) {
	s, e = max(s, u.lo), min(e, u.hi)
	if s >= e {
		return
	}
	if s > u.end {
		u.total += e - s
		u.end = e
	} else if e > u.end {
		u.total += e - u.end
		u.end = e
	}
}
