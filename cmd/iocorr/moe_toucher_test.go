package main

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/llmtest"
)

// moePlan is a scripted router: the picks of each decode token per layer,
// experts ascending (the order iocorr stats simulates caches in).
type moePlan struct {
	layers, experts, used int
	prefill               [][]int   // by layer: the picks of the prefill batch's rows
	decode                [][][]int // by token, by layer
}

// skewedPlan picks `used` distinct experts per layer and token, the low
// ids far more often, as a trained router's hot experts are.
func skewedPlan(layers, experts, used, tokens int, seed uint64) moePlan {
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
	p := moePlan{layers: layers, experts: experts, used: used}
	for range layers {
		p.prefill = append(p.prefill, pick())
	}
	for range tokens {
		var tok [][]int
		for range layers {
			tok = append(tok, pick())
		}
		p.decode = append(p.decode, tok)
	}
	return p
}

func (p moePlan) seq(layer int) []int {
	var s []int
	for _, tok := range p.decode {
		s = append(s, tok[layer]...)
	}
	return s
}

// The caches as their definitions read, written here apart from package
// stats: LRU evicts the least recently used; LFU the least used so far in
// the whole sequence (counts outlive eviction), the least recently used
// among equals; Belady the key used again farthest ahead (or never).
func refLRU(seq []int, k int) (hits int) {
	var c []int // most recent last
	for _, x := range seq {
		if i := slices.Index(c, x); i >= 0 {
			hits++
			c = slices.Delete(c, i, i+1)
		} else if len(c) == k {
			c = c[1:]
		}
		c = append(c, x)
	}
	return hits
}

func refLFU(seq []int, k int) (hits int) {
	count, last := map[int]int{}, map[int]int{}
	var c []int
	for t, x := range seq {
		count[x]++
		if slices.Contains(c, x) {
			hits++
		} else {
			if len(c) == k {
				v := 0
				for i := range c {
					if count[c[i]] < count[c[v]] || count[c[i]] == count[c[v]] && last[c[i]] < last[c[v]] {
						v = i
					}
				}
				c = slices.Delete(c, v, v+1)
			}
			c = append(c, x)
		}
		last[x] = t
	}
	return hits
}

func refBelady(seq []int, k int) (hits int) {
	next := func(x, from int) int {
		for i := from; i < len(seq); i++ {
			if seq[i] == x {
				return i
			}
		}
		return len(seq) + 1
	}
	var c []int
	for t, x := range seq {
		if slices.Contains(c, x) {
			hits++
			continue
		}
		if len(c) == k {
			v := 0
			for i := range c {
				if next(c[i], t+1) > next(c[v], t+1) {
					v = i
				}
			}
			c = slices.Delete(c, v, v+1)
		}
		c = append(c, x)
	}
	return hits
}

// refReuse: for each access, the distinct other keys since the previous
// access to the same key; -1 for a first access.
func refReuse(seq []int) map[int]int {
	h := map[int]int{}
	for i, x := range seq {
		j := i - 1
		for j >= 0 && seq[j] != x {
			j--
		}
		if j < 0 {
			h[-1]++
			continue
		}
		d := map[int]bool{}
		for _, y := range seq[j+1 : i] {
			d[y] = true
		}
		h[len(d)]++
	}
	return h
}

// TestMoEFiguresOfAScriptedRouterEqualTheirDefinitions is the ground
// truth of iocorr stats' MoE figures: a program that plays a known router
// through the probe points iocorr reads in llama.cpp (llama_decode, the
// ids under ggml_compute_forward_get_rows) and reads the picked experts'
// slices under a memory limit gives the activation matrix of its plan,
// the reuse distances and LRU/LFU/Belady hit rates computed here from the
// plan, and the real hit rate that mincore(2) showed the program itself
// at each token's start.
func TestMoEFiguresOfAScriptedRouterEqualTheirDefinitions(t *testing.T) {
	requireBPF(t)
	mt := llmtest.BuildMoEToucher(t)
	const layers, experts, used, tokens = 4, 8, 2, 24
	// BF16 slices of 512×1024×2 B = 1 MiB: 24 MiB of experts per layer.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: layers, Embd: 512, FF: 1024, Heads: 8, Experts: experts, ExpertsUsed: used, Type: llmtest.WeightType})
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	plan := skewedPlan(layers, experts, used, tokens, 7)
	var b strings.Builder
	for l := range layers {
		for _, kind := range []string{"gate", "up", "down"} {
			tn := f.Tensor(fmt.Sprintf("blk.%d.ffn_%s_exps.weight", l, kind))
			if tn == nil {
				t.Fatalf("no %s exps tensor in layer %d", kind, l)
			}
			lo, hi := tn.ExpertRange(0)
			fmt.Fprintf(&b, "slice %d %d %d\n", l, lo, hi-lo)
		}
	}
	line := func(n int, picks [][]int) {
		fmt.Fprintf(&b, "token %d", n)
		for l, ps := range picks {
			fmt.Fprintf(&b, " %d:%s", l, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ps)), ","), "[]"))
		}
		b.WriteString("\n")
	}
	line(3, plan.prefill)
	for _, tok := range plan.decode {
		line(1, tok)
	}
	planFile := filepath.Join(t.TempDir(), "plan")
	if err := os.WriteFile(planFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "run")
	out, errOut, err := runCmd(t, "record", "-o", dir, "--cold", "--mem-limit", "40MiB", "--probe", "pagecache", "--model", model, "--", mt, model, planFile)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, errOut)
	}
	// The program's own view: pick TOKEN LAYER EXPERT RESIDENT.
	realHits, realPicks := make([]int, layers), make([]int, layers)
	for _, ln := range strings.Split(strings.TrimSpace(out), "\n") {
		var tok, l, e, res int
		if _, err := fmt.Sscanf(ln, "pick %d %d %d %d", &tok, &l, &e, &res); err != nil {
			t.Fatalf("moetoucher said %q: %v", ln, err)
		}
		realPicks[l]++
		realHits[l] += res
	}

	st := runStats(t, dir)
	num := func(row map[string]any, col string) float64 {
		v, ok := row[col].(float64)
		if !ok {
			t.Fatalf("%v: %s is %v (%v)", row, col, row[col], row[col+"_na_reason"])
		}
		return v
	}

	// Activations: the plan's counts; a prefill batch counts each row.
	act := map[string]int{}
	for l := range layers {
		for _, e := range plan.prefill[l] {
			act[fmt.Sprintf("prefill/%d/%d", l, e)] += 3
		}
		for _, tok := range plan.decode {
			for _, e := range tok[l] {
				act[fmt.Sprintf("decode/%d/%d", l, e)]++
			}
		}
	}
	got := map[string]int{}
	for _, row := range st.Tables["expert_activations"] {
		if n := int(num(row, "activations")); n > 0 {
			got[fmt.Sprintf("%s/%d/%d", row["phase"], int(num(row, "layer")), int(num(row, "expert")))] = n
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(act) {
		t.Errorf("activations\n%v\nthe plan's\n%v", got, act)
	}

	// Reuse distances, summed over layers.
	wantReuse := map[int]int{}
	for l := range layers {
		for d, n := range refReuse(plan.seq(l)) {
			wantReuse[d] += n
		}
	}
	gotReuse := map[int]int{}
	for _, row := range st.Tables["reuse_distance"] {
		d := -1
		if row["distance"] != "first use" {
			d = int(num(row, "distance_experts"))
		}
		gotReuse[d] = int(num(row, "activations"))
	}
	if fmt.Sprint(gotReuse) != fmt.Sprint(wantReuse) {
		t.Errorf("reuse distances %v, from the plan %v", gotReuse, wantReuse)
	}

	// Hit rates per layer, policy and K.
	refs := map[string]func([]int, int) int{"lru": refLRU, "lfu": refLFU, "belady": refBelady}
	checked := 0
	for _, row := range st.Tables["cache_sim_layers"] {
		l, k, pol := int(num(row, "layer")), int(num(row, "k_experts")), row["policy"].(string)
		seq := plan.seq(l)
		want := float64(refs[pol](seq, k)) / float64(len(seq))
		if got := num(row, "hit_rate_ratio"); got != want {
			t.Errorf("layer %d %s K=%d: hit rate %v, from the plan %v", l, pol, k, got, want)
		}
		checked++
	}
	if checked != layers*len(refs)*experts {
		t.Errorf("%d cache simulations, want %d", checked, layers*len(refs)*experts)
	}

	// The real hit rate per layer: what mincore showed the program.
	var allHits, allPicks int
	for _, row := range st.Tables["routing"] {
		l := int(num(row, "layer"))
		want := float64(realHits[l]) / float64(realPicks[l])
		if got := num(row, "real_hit_rate_ratio"); got != want {
			t.Errorf("layer %d: real hit rate %v, mincore at each token's start says %d/%d", l, got, realHits[l], realPicks[l])
		}
		allHits, allPicks = allHits+realHits[l], allPicks+realPicks[l]
	}
	// A memory limit that holds some experts and not others: the figure
	// is tested where it is neither 0 nor 1.
	if allHits == 0 || allHits == allPicks {
		t.Errorf("%d of %d picks found their expert resident: the limit tests nothing", allHits, allPicks)
	}
	t.Logf("real hits %d/%d per layer %v/%v", allHits, allPicks, realHits, realPicks)
}
