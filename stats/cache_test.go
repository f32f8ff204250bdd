package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func hitString(h []bool) string {
	b := make([]byte, len(h))
	for i, v := range h {
		b[i] = '.'
		if v {
			b[i] = 'H'
		}
	}
	return string(b)
}

func TestCachePoliciesHitWhereWorkedByHand(t *testing.T) {
	for _, c := range []struct {
		name   string
		seq    []int
		k      int
		policy func([]int, int) []bool
		want   string
	}{
		// LRU k=2: 1 2 1 3 (evicts 2) 2 (evicts 1) 1 (evicts 3)
		{"lru evicts the least recently used", []int{1, 2, 1, 3, 2, 1}, 2, LRU, "..H..."},
		{"lru keeps a looping pair", []int{1, 2, 1, 2, 1, 2}, 2, LRU, "..HHHH"},
		// LRU k=2 on a loop of three always misses.
		{"lru thrashes on a loop longer than the cache", []int{1, 2, 3, 1, 2, 3}, 2, LRU, "......"},
		// LFU k=2: 1 1 2 3 (evicts 2: f1=2,f2=1) 1 (hit) 2 (evicts 3: f3=1,f2 was 1 → 3 is f1 l3; freq 2 becomes 2 on access)
		{"lfu keeps the frequent key", []int{1, 1, 2, 3, 1, 2}, 2, LFU, ".H..H."},
		// LFU counts survive eviction: 2 was used twice before, so 3 (once) goes.
		{"lfu remembers counts of evicted keys", []int{2, 2, 1, 1, 1, 3, 2, 3}, 2, LFU, ".H.HH..."},
		// Tie on count: the least recently used goes (1 then 2 then 3: 1 evicted).
		{"lfu breaks ties by recency", []int{1, 2, 3, 2, 1}, 2, LFU, "...H."},
		// Belady k=2: 1 2 3 (evict 2: next use of 1 is sooner) 1 2
		{"belady evicts the key used farthest ahead", []int{1, 2, 3, 1, 3, 2}, 2, Belady, "...HH."},
		{"belady evicts a key never used again first", []int{1, 2, 3, 1, 2}, 2, Belady, "...H."},
		{"k of zero never hits", []int{1, 1, 1}, 0, LRU, "..."},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := hitString(c.policy(c.seq, c.k)); got != c.want {
				t.Errorf("%v k=%d: got %s, want %s", c.seq, c.k, got, c.want)
			}
		})
	}
}

// optimalHits searches every eviction choice: the true optimum, computed
// without any notion of "farthest next use".
func optimalHits(seq []int, k int, cache []int) int {
	if len(seq) == 0 {
		return 0
	}
	x := seq[0]
	if slices.Contains(cache, x) {
		return 1 + optimalHits(seq[1:], k, cache)
	}
	if len(cache) < k {
		return optimalHits(seq[1:], k, append(slices.Clone(cache), x))
	}
	best := 0
	for i := range cache {
		c := slices.Clone(cache)
		c[i] = x
		best = max(best, optimalHits(seq[1:], k, c))
	}
	return best
}

func TestBeladyEqualsExhaustiveOptimumAndBeatsLRUAndLFU(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		n, keys, k := 4+r.IntN(8), 2+r.IntN(4), 1+r.IntN(3)
		seq := randomSeq(r, n, keys)
		t.Run(fmt.Sprint(trial), func(t *testing.T) {
			b := CountTrue(Belady(seq, k))
			if opt := optimalHits(seq, k, nil); b != opt {
				t.Fatalf("%v k=%d: belady %d hits, exhaustive optimum %d", seq, k, b, opt)
			}
			if l := CountTrue(LRU(seq, k)); l > b {
				t.Fatalf("%v k=%d: lru %d > belady %d", seq, k, l, b)
			}
			if l := CountTrue(LFU(seq, k)); l > b {
				t.Fatalf("%v k=%d: lfu %d > belady %d", seq, k, l, b)
			}
		})
	}
}

func TestEveryPolicyMissesOnlyFirstUsesWhenEveryKeyFits(t *testing.T) {
	seq := []int{3, 1, 4, 1, 5, 0, 2, 6, 5, 3, 5, 0, 2, 4}
	for name, p := range map[string]func([]int, int) []bool{"lru": LRU, "lfu": LFU, "belady": Belady} {
		if got, want := len(seq)-CountTrue(p(seq, 7)), Distinct(seq); got != want {
			t.Errorf("%s: %d misses, want the %d first uses", name, got, want)
		}
	}
}

func TestReuseDistancesCountDistinctKeysSinceLastUse(t *testing.T) {
	for _, c := range []struct {
		seq  []int
		want []int
	}{
		{[]int{1, 2, 3, 1}, []int{-1, -1, -1, 2}},
		{[]int{1, 1, 2, 2, 1}, []int{-1, 0, -1, 0, 1}},
		{[]int{1, 2, 2, 2, 1}, []int{-1, -1, 0, 0, 1}},
	} {
		if got := ReuseDistances(c.seq); !slices.Equal(got, c.want) {
			t.Errorf("%v: got %v, want %v", c.seq, got, c.want)
		}
	}
}

// bruteReuse counts distinct keys between two uses with a set.
func bruteReuse(seq []int) []int {
	out := make([]int, len(seq))
	for i, x := range seq {
		out[i] = -1
		for j := i - 1; j >= 0; j-- {
			if seq[j] == x {
				set := map[int]bool{}
				for _, y := range seq[j+1 : i] {
					set[y] = true
				}
				out[i] = len(set)
				break
			}
		}
	}
	return out
}

func TestReuseDistancesAgreeWithBruteForceAndPredictLRU(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 100 {
		seq := randomSeq(r, 30, 8)
		d := ReuseDistances(seq)
		if want := bruteReuse(seq); !slices.Equal(d, want) {
			t.Fatalf("%v: got %v, want %v", seq, d, want)
		}
		for k := 1; k <= 8; k++ {
			n := 0
			for _, x := range d {
				if x >= 0 && x < k {
					n++
				}
			}
			if l := CountTrue(LRU(seq, k)); l != n {
				t.Fatalf("%v k=%d: lru hits %d, accesses with distance < k %d", seq, k, l, n)
			}
		}
	}
}

func TestSummarizeGivesNearestRankPercentiles(t *testing.T) {
	xs := make([]float64, 200)
	for i := range xs {
		xs[i] = float64((i*37)%200 + 1) // 1..200 shuffled
	}
	d := Summarize(xs)
	// Nearest rank: the ceil(p·n)-th smallest value, here ceil(p·200).
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"mean", d.Mean, 100.5}, {"p50", d.P50, 100}, {"p90", d.P90, 180}, {"p99", d.P99, 198}, {"max", d.Max, 200},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if d := Summarize([]float64{7}); d.P50 != 7 || d.P99 != 7 || d.Mean != 7 {
		t.Errorf("one value: %+v", d)
	}
}

func TestEntropyBitsOfKnownDistributions(t *testing.T) {
	for _, c := range []struct {
		counts []float64
		want   float64
	}{
		{[]float64{5, 5, 5, 5}, 2},
		{[]float64{8, 0, 0, 0}, 0},
		{[]float64{1, 1}, 1},
		{[]float64{2, 1, 1}, 1.5}, // ½·1 + ¼·2 + ¼·2
		{nil, 0},
	} {
		if got := EntropyBits(c.counts); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("%v: %v bits, want %v", c.counts, got, c.want)
		}
	}
}

func TestOverlapIsTheShareOfExpertsKept(t *testing.T) {
	if got := Overlap([]int{1, 2}, []int{2, 3}); got != 0.5 {
		t.Errorf("got %v", got)
	}
	if got := Overlap(nil, []int{2, 3}); got != 0 {
		t.Errorf("got %v", got)
	}
}

func TestUnionNSCountsOverlappingStallsOnce(t *testing.T) {
	for _, c := range []struct {
		iv     [][2]uint64
		lo, hi uint64
		want   uint64
	}{
		{[][2]uint64{{10, 20}, {15, 30}}, 0, 100, 20},
		{[][2]uint64{{10, 20}, {30, 40}}, 0, 100, 20},
		{[][2]uint64{{10, 20}, {12, 14}}, 0, 100, 10},
		{[][2]uint64{{0, 50}}, 20, 30, 10},
		{[][2]uint64{{0, 10}}, 20, 30, 0},
	} {
		if got := UnionNS(c.iv, c.lo, c.hi); got != c.want {
			t.Errorf("%v in [%d,%d): got %d, want %d", c.iv, c.lo, c.hi, got, c.want)
		}
	}
}

// scanLFU is LFU by scanning the whole cache for its victim.
func scanLFU(seq []int, k int) []bool {
	hits := make([]bool, len(seq))
	freq, last, in := map[int]int{}, map[int]int{}, map[int]bool{}
	for i, x := range seq {
		freq[x]++
		if in[x] {
			hits[i] = true
		} else {
			if len(in) == k {
				victim, vf, vl := 0, math.MaxInt, math.MaxInt
				for y := range in {
					if freq[y] < vf || (freq[y] == vf && last[y] < vl) {
						victim, vf, vl = y, freq[y], last[y]
					}
				}
				delete(in, victim)
			}
			in[x] = true
		}
		last[x] = i
	}
	return hits
}

func TestLFUAgreesWithAFullScanOfTheCache(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		seq := randomSeq(r, 60, 10)
		k := 1 + r.IntN(6)
		if got, want := hitString(LFU(seq, k)), hitString(scanLFU(seq, k)); got != want {
			t.Fatalf("%v k=%d: got %s, want %s", seq, k, got, want)
		}
	}
}

// randomSeq is n keys drawn uniformly from [0, keys) by r.
func randomSeq(r *rand.Rand, n, keys int) []int {
	seq := make([]int, n)
	for i := range seq {
		seq[i] = r.IntN(keys)
	}
	return seq
}
