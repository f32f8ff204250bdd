package bench

import (
	"maps"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/pin"
)

// The prefetched runs run what plan advises, as plan.json keeps it: its
// policy (layers is prefetch-both) and its window; where it advises none
// the bench forces the experts' at the default window.
func TestThePrefetchedRunsRunThePrefetcherPlanAdvises(t *testing.T) {
	for _, tc := range []struct {
		name    string
		advice  pin.Prefetch
		advised bool
		policy  string
		flags   []string
		record  []string
	}{
		{"both, with a window", pin.Prefetch{Policy: "prefetch-both", Layers: true, WindowBytes: 28385280, Command: "iocorr prefetch --layers …"},
			true, "prefetch-both", []string{"--layers", "--window", "28385280"}, []string{"--prefetch", "--prefetch-layers", "--prefetch-window", "28385280"}},
		{"the experts'", pin.Prefetch{Policy: "prefetch-experts", WindowBytes: 33116160, Command: "iocorr prefetch --window …"},
			true, "prefetch-experts", []string{"--window", "33116160"}, []string{"--prefetch", "--prefetch-window", "33116160"}},
		{"none: forced at the default window", pin.Prefetch{Reason: "no prefetch: …"},
			false, "prefetch-experts", nil, []string{"--prefetch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, advised, err := adviceOf(&pin.Plan{Prefetch: &tc.advice})
			if err != nil {
				t.Fatal(err)
			}
			if advised != tc.advised || a.policy() != tc.policy || !slices.Equal(a.prefetchFlags(), tc.flags) || !slices.Equal(a.recordFlags(), tc.record) {
				t.Errorf("advised %v, %s, prefetch %q, record %q; want %v, %s, %q, %q",
					advised, a.policy(), a.prefetchFlags(), a.recordFlags(), tc.advised, tc.policy, tc.flags, tc.record)
			}
		})
	}
}

// A plan written without advice (before plan kept it) is an error, not
// advice of none.
func TestAPlanWithoutPrefetchAdviceIsAnError(t *testing.T) {
	if _, _, err := adviceOf(&pin.Plan{}); err == nil {
		t.Error("no error")
	}
}

// predict's prefetch rows are held to the readers' mode the traced
// prefetched runs fell in, told by the median of what they read; with no
// such run, or no row with bytes, the figures are NA and say why.
func TestPredictedPrefetchFiguresAreTheModeThePrefetchedRunsFellIn(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	rows := []predictRow{
		{Policy: "kernel", Phase: "decode", Mode: "one-reader", Bytes: f(400), TPS: f(3)},
		{Policy: "prefetch-both", Phase: "prefill", Mode: "racing-readers", Bytes: f(260), TPS: f(1)},
		{Policy: "prefetch-both", Phase: "decode", Mode: "one-reader", Bytes: f(217), TPS: f(7.2)},
		{Policy: "prefetch-both", Phase: "decode", Mode: "racing-readers", Bytes: f(286), TPS: f(5.6)},
	}
	for _, tc := range []struct {
		name       string
		rows       []predictRow
		prefetched []float64
		wantMode   string
		wantTPS    float64
		wantWhy    string
	}{
		{"runs nearest the racing readers' row", rows, []float64{265, 250, 280}, "racing-readers", 5.6, ""},
		{"runs nearest one reader's row", rows, []float64{230, 172, 200}, "one-reader", 7.2, ""},
		{"no traced prefetched run", rows, nil, "", 0, "no traced prefetched run"},
		{"no decode row of the policy", rows[:2], []float64{265}, "", 0, "no decode row of prefetch-both"},
		{"the policy's bytes NA", []predictRow{{Policy: "prefetch-both", Phase: "decode", Mode: "one-reader", Why: "the picks are NA"}}, []float64{265}, "", 0, "the picks are NA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tps, bytes, mode, why := prefetchedMode(tc.rows, "prefetch-both", tc.prefetched, "")
			if mode != tc.wantMode || !strings.Contains(why, tc.wantWhy) || (tc.wantWhy == "") != (why == "") {
				t.Fatalf("mode %q, why %q; want %q, why %q", mode, why, tc.wantMode, tc.wantWhy)
			}
			if tc.wantMode != "" && (tps == nil || *tps != tc.wantTPS || bytes == nil) {
				t.Errorf("tokens/s %v, bytes %v; want %v", tps, bytes, tc.wantTPS)
			}
		})
	}
}

// predict's tokens/s is held to the traced prefetched runs, recorded as
// the run it learned from was and right after it; its ratio to the
// untraced pairs, minutes later, is given beside with no goal. Without a
// traced prefetched run the held figure is NA and says why.
func TestPredictsTokensPerSecondIsHeldToTheTracedPrefetchedRuns(t *testing.T) {
	f := func(x float64) *float64 { return &x }
	untraced := []prefetchRun{{tps: 8}, {tps: 8}, {tps: 8}}
	for _, tc := range []struct {
		name       string
		bf         before
		heldMedian float64
		heldMet    bool
		heldNA     string
	}{
		{"traced runs near the prediction", before{pf: advice{layers: true}, predictedTPS: f(10), predictedBytes: f(200),
			prefetchedTPS: []float64{9, 10, 11}, prefetchedBytes: []float64{200, 210, 190}}, 1, true, ""},
		{"traced runs far from it", before{pf: advice{layers: true}, predictedTPS: f(10), predictedBytes: f(200),
			prefetchedTPS: []float64{7, 8, 7.5}, prefetchedBytes: []float64{200, 210, 190}}, 10 / 7.5, false, ""},
		{"no traced prefetched run", before{pf: advice{layers: true}, predictedTPS: f(10), predictedBytes: f(200),
			prefetchedWhy: "the recording failed"}, 0, false, "the recording failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Report
			predictedFigures(&r, "case", tc.bf, untraced)
			byName := map[string]Figure{}
			for _, fg := range r.Figures {
				byName[fg.Name] = fg
			}
			held, ok := byName["case: predict's prefetch-both ÷ measured decode tokens/s (record --prefetch)"]
			beside, ok2 := byName["case: predict's prefetch-both ÷ measured decode tokens/s (the untraced pairs)"]
			if !ok || !ok2 {
				t.Fatalf("figures %v: want the held and the untraced tokens/s", slices.Collect(maps.Keys(byName)))
			}
			if tc.heldNA != "" {
				if !strings.Contains(held.NA, tc.heldNA) {
					t.Errorf("held figure NA %q, want %q", held.NA, tc.heldNA)
				}
			} else if held.Target == nil || held.Target.Met == nil || *held.Target.Met != tc.heldMet || math.Abs(held.Median-tc.heldMedian) > 1e-9 {
				t.Errorf("held figure median %v, target %+v; want %v, met %v", held.Median, held.Target, tc.heldMedian, tc.heldMet)
			}
			if beside.Target != nil || beside.Median != 10.0/8 {
				t.Errorf("untraced figure median %v, target %+v; want 1.25 and no goal", beside.Median, beside.Target)
			}
		})
	}
}
