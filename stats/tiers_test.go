package stats_test

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

// A run of the default tier has no page-cache events: what is replayed
// from them (residency per token, refaults, residency at the end, the real
// hit rate) is NA with the tier's reason, never the zero an empty history
// would replay to; what faults and block reads measure is unchanged.
func TestTheDefaultTierLeavesPageCacheFiguresNAWithItsReason(t *testing.T) {
	dir, s := buildScripted(t)
	s.meta.Tier = rundir.TierDefault
	s.meta.Probes = []rundir.Probe{{Kind: "tracepoint", Target: rundir.TracepointPageAdd, Error: "not attached: the default tier"}}
	if err := rundir.WriteMeta(dir, s.meta); err != nil {
		t.Fatal(err)
	}
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := stats.Compute(st, meta, stats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tier := func(what string, v stats.Value) {
		t.Helper()
		if !strings.Contains(v.NA, "--probe "+rundir.TierPageCache) {
			t.Errorf("%s: NA %q, want the tier's reason", what, v.NA)
		}
	}
	exps := find(t, rep, "tensors", map[string]any{"tensor": "blk.0.ffn_up_exps.weight"})
	tier("refault_pages", exps["refault_pages"])
	tier("resident_end_pages", exps["resident_end_pages"])
	// Measured without page-cache events: mincore at the end, device reads.
	if exps["resident_end_mincore_pages"].I != 6 || exps["readahead_amplification_ratio"].F != 2 {
		t.Errorf("mincore %v, readahead amplification %v: want 6 and 2, as in the pagecache tier",
			exps["resident_end_mincore_pages"], exps["readahead_amplification_ratio"])
	}
	tb := rep.Table("residency")
	for _, r := range tb.Rows {
		tier("residency", r[2])
	}
	routing := rep.Table("routing")
	for _, r := range routing.Rows {
		for i, c := range routing.Columns {
			if c.Name == "real_hit_rate_ratio" {
				tier("real hit rate", r[i])
			}
		}
	}
}
