package bench

import (
	"slices"
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
