package rundir_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
)

func TestNAReasonsSayWhyAFigureWasNotMeasured(t *testing.T) {
	picks := rundir.Probe{Kind: "uprobe", Target: "libggml-cpu.so", Symbol: ggml.SymGetRows}
	reads := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointSysEnterRead}
	failed := func(p rundir.Probe) rundir.Probe { p.Error = "no such symbol"; return p }
	tests := []struct {
		name             string
		meta             rundir.Meta
		wantPicks, reads string // substrings of the reasons; "" when measured
	}{
		{"both attached", rundir.Meta{Probes: []rundir.Probe{picks, reads}}, "", ""},
		{"nothing attached", rundir.Meta{}, "no probe on " + ggml.SymGetRows + " attached", "did not trace read syscalls"},
		{"probes that failed to attach", rundir.Meta{Probes: []rundir.Probe{failed(picks), failed(reads)}},
			"no probe on " + ggml.SymGetRows + " attached", "did not trace read syscalls"},
		{"a layout that failed validation", rundir.Meta{Probes: []rundir.Probe{picks, reads}, Layout: &rundir.Layout{Invalid: "node 3 has no op"}},
			"failed validation against the target (node 3 has no op)", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what, got, want string) {
				if (want == "") != (got == "") || !strings.Contains(got, want) {
					t.Errorf("%s NA: %q, want %q", what, got, want)
				}
			}
			check("picks", tc.meta.PicksNA(), tc.wantPicks)
			check("reads", tc.meta.ReadsNA(), tc.reads)
		})
	}
}

func TestResidencyIsKnownWhenNoneOrAllPagesWereResident(t *testing.T) {
	for _, tc := range []struct {
		before, pages int64
		known         bool
	}{{0, 10, true}, {10, 10, true}, {3, 10, false}, {0, 0, true}} {
		f := rundir.ModelFile{Path: "m.gguf", ResidentBefore: tc.before, Pages: tc.pages}
		why := f.ResidencyNA()
		if (why == "") != tc.known {
			t.Errorf("%d of %d pages resident before: NA %q, want known %v", tc.before, tc.pages, why, tc.known)
		}
		if !tc.known && !strings.Contains(why, "3 of 10 pages of m.gguf") {
			t.Errorf("the reason does not say which file and how much: %q", why)
		}
	}
}

// A run says which counters its tier measured: the page-cache counters
// only with the page-cache tracepoint attached, bytes requested only with
// the read syscalls traced; the others always.
func TestCounterNAFollowsTheProbesTheTierAttached(t *testing.T) {
	pages := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointPageAdd}
	reads := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointSysEnterRead}
	offByTier := pages
	offByTier.Error = "not attached: the default tier"
	names := make([]string, len(event.CounterFields))
	for i := range event.CounterFields {
		names[i] = event.CounterFields[i].Name
	}
	tests := []struct {
		name string
		meta rundir.Meta
		na   []string
	}{
		{"pagecache tier", rundir.Meta{Tier: rundir.TierPageCache, Probes: []rundir.Probe{pages, reads}}, nil},
		{"default tier", rundir.Meta{Tier: rundir.TierDefault, Probes: []rundir.Probe{offByTier, reads}}, rundir.PageCacheCounters},
		{"default tier, reads not traced", rundir.Meta{Tier: rundir.TierDefault, Probes: []rundir.Probe{offByTier}},
			append(slices.Clone(rundir.PageCacheCounters), "bytes_requested")},
		{"before tiers: every page-cache probe attached", rundir.Meta{Probes: []rundir.Probe{pages, reads}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.meta.CountersNA(names)
			if len(got) != len(tc.na) {
				t.Errorf("NA %v, want %v", got, tc.na)
			}
			for _, n := range tc.na {
				if got[n] == "" {
					t.Errorf("%s measured, want NA", n)
				}
			}
			if why := tc.meta.PageCacheNA(); slices.Contains(tc.na, "pages_added") &&
				!strings.Contains(why, "--probe "+rundir.TierPageCache) {
				t.Errorf("the reason does not say how to measure it: %q", why)
			}
		})
	}
	// Every page-cache counter is a counter of the store.
	for _, n := range rundir.PageCacheCounters {
		if _, ok := event.CounterByName(n); !ok {
			t.Errorf("page-cache counter %s is not in event.CounterFields", n)
		}
	}
}
