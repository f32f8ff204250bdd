//go:build linux

package stats_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The MoE figures' ground truth: a scripted router (testkit/rectest's
// plan) played by llmtest's moetoucher under a memory limit, recorded
// through the library, and the figures stats computes from its store set
// against their definitions, written here apart from package stats.

// The recorder re-executes this test binary as the held child.
func TestMain(m *testing.M) { rectest.Main(m) }

// computeStats is `iocorr stats --format json` of the run in dir: every
// table, its rows by column name.
func computeStats(t *testing.T, dir string) map[string][]map[string]stats.Value {
	t.Helper()
	run := storetest.OpenRun(t, dir)
	snaps, err := rundir.ReadSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stats.Compute(run, stats.Options{Top: 10, Snapshots: snaps})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]map[string]stats.Value{}
	for _, tb := range rep.Tables {
		for _, r := range tb.Rows {
			row := map[string]stats.Value{}
			for i, c := range tb.Columns {
				row[c.Name] = r[i]
			}
			out[tb.Name] = append(out[tb.Name], row)
		}
	}
	return out
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
	testenv.RequireBPF(t)
	mt := llmtest.BuildMoEToucher(t)
	const layers, experts, used, tokens = 4, 8, 2, 24
	// BF16 slices of 512×1024×2 B = 1 MiB: 24 MiB of experts per layer.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: layers, Embd: 512, FF: 1024, Heads: 8, Experts: experts, ExpertsUsed: used, Type: llmtest.WeightType})
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	plan := rectest.SkewedPlan(layers, experts, used, tokens, 7)
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
	line(3, plan.Prefill)
	for _, tok := range plan.Decode {
		line(1, tok)
	}
	planFile := filepath.Join(t.TempDir(), "plan")
	if err := os.WriteFile(planFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	dir := filepath.Join(t.TempDir(), "run")
	out := rectest.Record(t, dir, rectest.Options{Cold: true, MemLimit: "40MiB", Probe: "pagecache", Set: func(o *recorder.Options) { o.Models = []string{model} }},
		mt, model, planFile).Stdout
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

	st := computeStats(t, dir)
	num := func(row map[string]stats.Value, col string) float64 {
		v, ok := row[col]
		if !ok {
			t.Fatalf("%v: no column %s", row, col)
		}
		if v.NA != "" {
			t.Fatalf("%v: %s is NA (%s)", row, col, v.NA)
		}
		return v.F + float64(v.I) // a cell holds one of them
	}

	// Activations: the plan's counts; a prefill batch counts each row.
	act := map[string]int{}
	for l := range layers {
		for _, e := range plan.Prefill[l] {
			act[fmt.Sprintf("prefill/%d/%d", l, e)] += 3
		}
		for _, tok := range plan.Decode {
			for _, e := range tok[l] {
				act[fmt.Sprintf("decode/%d/%d", l, e)]++
			}
		}
	}
	got := map[string]int{}
	for _, row := range st["expert_activations"] {
		if n := int(num(row, "activations")); n > 0 {
			got[fmt.Sprintf("%s/%d/%d", row["phase"].S, int(num(row, "layer")), int(num(row, "expert")))] = n
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(act) {
		t.Errorf("activations\n%v\nthe plan's\n%v", got, act)
	}

	// Reuse distances, summed over layers.
	wantReuse := map[int]int{}
	for l := range layers {
		for d, n := range refReuse(plan.Seq(l)) {
			wantReuse[d] += n
		}
	}
	gotReuse := map[int]int{}
	for _, row := range st["reuse_distance"] {
		d := int(num(row, "distance_experts"))
		if (d < 0) != (row["kind"].S == stats.ReuseKindFirst) {
			t.Errorf("reuse_distance: kind %q at distance %d", row["kind"].S, d)
		}
		gotReuse[d] = int(num(row, "activations"))
	}
	if fmt.Sprint(gotReuse) != fmt.Sprint(wantReuse) {
		t.Errorf("reuse distances %v, from the plan %v", gotReuse, wantReuse)
	}

	// Hit rates per layer, policy and K.
	refs := map[string]func([]int, int) int{"lru": refLRU, "lfu": refLFU, "belady": refBelady}
	checked := 0
	for _, row := range st["cache_sim_layers"] {
		l, k, pol := int(num(row, "layer")), int(num(row, "k_experts")), row["policy"].S
		seq := plan.Seq(l)
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
	for _, row := range st["routing"] {
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
