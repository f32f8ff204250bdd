package bench

import (
	"slices"
	"testing"
)

// The prefetched runs run what plan advises: its policy (--layers is
// prefetch-both) and its window, read from the command it prints; where
// it advises none the bench forces the experts' at the default window.
func TestThePrefetchedRunsRunThePrefetcherPlanAdvises(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out     string
		advised bool
		policy  string
		flags   []string
		record  []string
	}{
		{"both, with a window",
			"pin: nothing\nprefetch: iocorr prefetch --layers --window 28385280 --mem-limit 167772160 -- llama-completion -m 'a b.gguf' --layers 3\nprefetch-both is predicted…\n",
			true, "prefetch-both", []string{"--layers", "--window", "28385280"}, []string{"--prefetch", "--prefetch-layers", "--prefetch-window", "28385280"}},
		{"the experts'",
			"pin: nothing\nprefetch: iocorr prefetch --window 33116160 --mem-limit 100663296 -- llama-completion -m m.gguf\n",
			true, "prefetch-experts", []string{"--window", "33116160"}, []string{"--prefetch", "--prefetch-window", "33116160"}},
		{"none: forced at the default window",
			"pin: nothing\nno prefetch: none is predicted to give 1.1× the decode tokens/s\n",
			false, "prefetch-experts", nil, []string{"--prefetch"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, advised, err := adviceOf([]byte(tc.out))
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

// A window plan printed that is no number is an error, not a default.
func TestAnUnreadableWindowInPlansAdviceIsAnError(t *testing.T) {
	if _, _, err := adviceOf([]byte("x\nprefetch: iocorr prefetch --window 2MiBx --mem-limit 1 -- c\n")); err == nil {
		t.Error("no error")
	}
}
