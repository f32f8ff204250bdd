package diff_test

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// storeOf writes res through the real store writer and opens it.
func storeOf(t *testing.T, res event.Result) *store.Store {
	t.Helper()
	return storetest.FromResult(t, res)
}

func agg(token, tensor uint32, expert int16, major, read, requested uint64) event.Agg {
	return event.Agg{AggKey: event.AggKey{Token: token, Tensor: tensor, Expert: expert},
		Counters: event.Counters{Faults: major, Major: major, ReadBytes: read, RequestedBytes: requested}}
}

// twoRuns are two runs of different models. A: an expert tensor of 4
// experts and attn_q in layers 0 and 1, 2 tokens. B: the expert tensor
// with 2 experts, attn_q in layer 0 only, an output tensor, 3 tokens; B's
// recorder traced no read syscalls.
func twoRuns(t *testing.T) (a, b diff.Run) {
	exps := func(experts int) event.Tensor {
		return event.Tensor{ID: 3, Name: "blk.0.ffn_down_exps.weight", Layer: 0, Experts: experts, ExpertStride: 4096}
	}
	ta := append(slices.Clone(storetest.Pseudos), exps(4), event.Tensor{ID: 4, Name: "blk.0.attn_q.weight", Layer: 0},
		event.Tensor{ID: 5, Name: "blk.1.attn_q.weight", Layer: 1})
	tb := append(slices.Clone(storetest.Pseudos), exps(2), event.Tensor{ID: 4, Name: "blk.0.attn_q.weight", Layer: 0},
		event.Tensor{ID: 5, Name: "output.weight", Layer: -1})
	tokens := func(n uint32) []event.TokenInfo {
		ts := []event.TokenInfo{{Token: 1, Phase: event.PhasePrefill}}
		for i := uint32(2); i <= n; i++ {
			ts = append(ts, event.TokenInfo{Token: i, Phase: event.PhaseDecode})
		}
		return ts
	}
	// Aggregates sorted by token, tensor, expert, op, as the correlator
	// leaves them.
	// Token 0 (the load, outside every llama_decode call) evicted pages
	// in A only: B has a token 0 too, and its 0 there is measured.
	ra := event.Result{Tensors: ta, Ops: []string{""}, Tokens: tokens(2), Aggs: []event.Agg{
		{AggKey: event.AggKey{Token: 0, Tensor: 3}, Counters: event.Counters{PagesEvicted: 7}},
		agg(1, 3, 0, 1, 4096, 100), agg(1, 3, 3, 2, 8192, 0), agg(1, 5, -1, 2, 4096, 0),
	}, Experts: []event.ExpertSel{{Token: 2, Layer: 0, Expert: 3, Count: 1}}}
	rb := event.Result{Tensors: tb, Ops: []string{""}, Tokens: tokens(3), Aggs: []event.Agg{
		agg(1, 3, 0, 6, 4096, 0), agg(2, 4, -1, 5, 8192, 0), agg(3, 5, -1, 1, 4096, 0),
	}, Experts: []event.ExpertSel{{Token: 2, Layer: 0, Expert: 0, Count: 2}}}
	// Both runs recorded the pagecache tier: their page-cache counters are
	// measured.
	probes := []rundir.Probe{{Kind: "uprobe", Target: "lib.so", Symbol: ggml.SymGetRows},
		{Kind: "tracepoint", Target: rundir.TracepointPageAdd}}
	ma := &rundir.Meta{Finished: true, Complete: true, Probes: append(slices.Clone(probes), rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointSysEnterRead})}
	mb := &rundir.Meta{Finished: true, Complete: true, Probes: probes}
	return diff.Run{Store: storeOf(t, ra), Meta: ma}, diff.Run{Store: storeOf(t, rb), Meta: mb}
}

// want is one expected cell: NA values are -1, NaN for the ratio.
type want struct {
	key, counter string
	in           diff.In
	a, b         int64
	delta        int64
	ratio        float64
	why          string // in the delta's or ratio's NA reason
}

func TestCompareGivesEachCounterInBothRunsWithItsChangeAndRatioOrNAWithAReason(t *testing.T) {
	na := math.NaN()
	tests := []struct {
		name string
		o    diff.Options
		want []want
	}{
		{"by tensor: a tensor in both, one charged only in B (zero baseline), one only in each model",
			diff.Options{By: "tensor", Counters: []string{"major_faults"}}, []want{
				{"blk.0.ffn_down_exps.weight", "major_faults", diff.Both, 3, 6, 3, 2, ""},
				{"blk.1.attn_q.weight", "major_faults", diff.OnlyA, 2, -1, 0, na, "the tensor is not in run B's model"},
				{"blk.0.attn_q.weight", "major_faults", diff.Both, 0, 5, 5, na, "the baseline (run A) is 0"},
				{"output.weight", "major_faults", diff.OnlyB, -1, 1, 0, na, "run A: the tensor is not in run A's model"},
			}},
		{"a counter run B did not measure is NA there, never 0",
			diff.Options{By: "tensor", Tensor: "blk.0.ffn_down_exps.weight", Counters: []string{"bytes_requested"}}, []want{
				{"blk.0.ffn_down_exps.weight", "bytes_requested", diff.Both, 100, -1, 0, na, "run B: not measured: this run's recorder did not trace read syscalls"},
			}},
		{"by layer: a layer only A's model has",
			diff.Options{By: "layer", Counters: []string{"bytes_read"}}, []want{
				{"-1", "bytes_read", diff.OnlyB, -1, 4096, 0, na, "run A's model has layers 0-1"},
				{"0", "bytes_read", diff.Both, 12288, 12288, 0, 1, ""},
				{"1", "bytes_read", diff.OnlyA, 4096, -1, 0, na, "run B's model has layers 0-0"},
			}},
		{"by expert: experts beyond B's count are NA in B; picks compared",
			diff.Options{By: "expert", Counters: []string{"major_faults", store.Selected}}, []want{
				{"-1", "major_faults", diff.Both, 2, 6, 4, 3, ""},
				{"-1", store.Selected, diff.Both, 0, 0, 0, na, "0 in both runs"},
				{"0", "major_faults", diff.Both, 1, 6, 5, 6, ""},
				{"0", store.Selected, diff.Both, 0, 2, 2, na, "the baseline (run A) is 0"},
				{"3", "major_faults", diff.OnlyA, 2, -1, 0, na, "run B's model has 2 experts per layer"},
				{"3", store.Selected, diff.OnlyA, 1, -1, 0, na, "run B's model has 2 experts per layer"},
			}},
		{"by token: a token only B ran; the load (token 0) in both",
			diff.Options{By: "token", Counters: []string{"major_faults", "pages_evicted"}}, []want{
				{"0", "major_faults", diff.Both, 0, 0, 0, na, "0 in both runs"},
				{"0", "pages_evicted", diff.Both, 7, 0, -7, 0, ""},
				{"1", "major_faults", diff.Both, 5, 6, 1, 1.2, ""},
				{"1", "pages_evicted", diff.Both, 0, 0, 0, na, "0 in both runs"},
				{"2", "major_faults", diff.Both, 0, 5, 5, na, "the baseline (run A) is 0"},
				{"2", "pages_evicted", diff.Both, 0, 0, 0, na, "0 in both runs"},
				{"3", "major_faults", diff.OnlyB, -1, 1, 0, na, "run A has 2 llama_decode calls"},
				{"3", "pages_evicted", diff.OnlyB, -1, 0, 0, na, "run A has 2 llama_decode calls"},
			}},
		{"by phase, one phase",
			diff.Options{By: "phase", Phase: "decode", Counters: []string{"major_faults"}}, []want{
				{"decode", "major_faults", diff.Both, 0, 6, 6, na, "the baseline (run A) is 0"},
			}},
		{"sorted by the largest change, cut to the top 2",
			diff.Options{By: "tensor", Counters: []string{"major_faults"}, Sort: "major_faults", Top: 2}, []want{
				{"blk.0.attn_q.weight", "major_faults", diff.Both, 0, 5, 5, na, "the baseline (run A) is 0"},
				{"blk.0.ffn_down_exps.weight", "major_faults", diff.Both, 3, 6, 3, 2, ""},
			}},
		{"a tensor only one run has: every value of the other is NA",
			diff.Options{By: "layer", Tensor: "output.weight", Counters: []string{"faults"}}, []want{
				{"-1", "faults", diff.OnlyB, -1, 1, 0, na, `no tensor of run A matches "output.weight"`},
			}},
	}
	a, b := twoRuns(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := diff.Compare(a, b, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			var got []want
			for _, g := range res.Groups {
				for _, c := range g.Cells {
					w := want{key: g.Key, counter: c.Counter, in: g.In, a: int64(c.A.V), b: int64(c.B.V), delta: c.Delta, ratio: c.Ratio}
					if c.A.NA != "" {
						w.a = -1
					}
					if c.B.NA != "" {
						w.b = -1
					}
					w.why = c.DeltaNA
					if c.RatioNA != "" {
						w.ratio, w.why = na, c.RatioNA
					}
					got = append(got, w)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d cells, want %d:\n%+v", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				g := got[i]
				ok := g.key == w.key && g.counter == w.counter && g.in == w.in && g.a == w.a && g.b == w.b &&
					(math.IsNaN(w.ratio) == math.IsNaN(g.ratio)) && (math.IsNaN(w.ratio) || math.Abs(g.ratio-w.ratio) < 1e-12) &&
					strings.Contains(g.why, w.why) && (w.why == "") == (g.why == "")
				if ok && g.a >= 0 && g.b >= 0 && g.delta != w.delta {
					ok = false
				}
				if !ok {
					t.Errorf("cell %d: got %+v\nwant %+v", i, g, w)
				}
			}
		})
	}
}

func TestCompareNamesTheTensorsOnlyOneRunHas(t *testing.T) {
	a, b := twoRuns(t)
	res, err := diff.Compare(a, b, diff.Options{By: "phase"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.OnlyA, []string{"blk.1.attn_q.weight"}) || !slices.Equal(res.OnlyB, []string{"output.weight"}) {
		t.Errorf("only in A %q, only in B %q", res.OnlyA, res.OnlyB)
	}
}

func TestCompareRejectsWhatItCannotCompare(t *testing.T) {
	a, b := twoRuns(t)
	for _, tc := range []struct {
		name string
		o    diff.Options
		want string
	}{
		{"unknown group", diff.Options{By: "colour"}, `cannot compare by "colour"`},
		{"unknown counter", diff.Options{Counters: []string{"speed"}}, `unknown counter "speed"`},
		{"picks outside a comparison by expert", diff.Options{By: "layer", Counters: []string{store.Selected}}, "only compared by expert"},
		{"sort by a counter not compared", diff.Options{Counters: []string{"faults"}, Sort: "bytes_read"}, `cannot sort by "bytes_read"`},
		{"negative top", diff.Options{Top: -1}, "top must not be negative"},
		{"a tensor neither run has", diff.Options{Tensor: "blk.9.*"}, `no tensor of either run matches "blk.9.*"`},
		{"unknown phase", diff.Options{Phase: "warmup"}, "run A: unknown phase"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := diff.Compare(a, b, tc.o)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line containing %q", err, tc.want)
			}
		})
	}
}
