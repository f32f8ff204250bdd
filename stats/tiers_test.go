package stats_test

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// computeDefaultTier computes the scripted run as if it were recorded in
// the default tier: no page-cache events, the recorder's snapshots.
func computeDefaultTier(t *testing.T, snaps []rundir.Snapshot) (*stats.Report, scripted) {
	t.Helper()
	dir, s := buildScripted(t)
	s.meta.Tier = rundir.TierDefault
	s.meta.Probes = []rundir.Probe{{Kind: "tracepoint", Target: rundir.TracepointPageAdd, Error: "not attached: the default tier"}}
	s.meta.ResidencySnapshots = &rundir.SnapshotStats{Taken: uint64(len(snaps)), Throttled: 5}
	if err := rundir.WriteMeta(dir, s.meta); err != nil {
		t.Fatal(err)
	}
	run := storetest.OpenRun(t, dir)
	rep, err := stats.Compute(run, stats.Options{Snapshots: snaps})
	if err != nil {
		t.Fatal(err)
	}
	return rep, s
}

func routingHitRate(t *testing.T, rep *stats.Report, layer int64) stats.Value {
	t.Helper()
	tb := rep.Table("routing")
	l, h := tb.Col("layer"), tb.Col("real_hit_rate_ratio")
	for _, r := range tb.Rows {
		if r[l].I == layer && r[l].NA == "" {
			return r[h]
		}
	}
	t.Fatalf("routing has no layer %d", layer)
	return stats.Value{}
}

// A run of the default tier without snapshots has no residency: NA with
// the tier's reason, never the zero an empty history would replay to; what
// faults and device reads measure is unchanged, refaults included (a page
// read from the device again).
func TestTheDefaultTierLeavesPageCacheFiguresNAWithItsReason(t *testing.T) {
	rep, _ := computeDefaultTier(t, nil)
	tier := func(what string, v stats.Value) {
		t.Helper()
		if !strings.Contains(v.NA, "--probe "+rundir.TierPageCache) {
			t.Errorf("%s: NA %q, want the tier's reason", what, v.NA)
		}
	}
	exps := find(t, rep, "tensors", map[string]any{"tensor": "blk.0.ffn_up_exps.weight"})
	tier("resident_end_pages", exps["resident_end_pages"])
	// Measured without page-cache events: refaults from device reads (the
	// scripted run read no page twice), mincore at the end, device reads.
	if exps["refault_pages"].NA != "" || exps["refault_pages"].I != 0 || exps["resident_end_mincore_pages"].I != 6 || exps["readahead_amplification_ratio"].F != 2 {
		t.Errorf("refaults %v, mincore %v, readahead amplification %v: want 0, 6 and 2, as in the pagecache tier",
			exps["refault_pages"], exps["resident_end_mincore_pages"], exps["readahead_amplification_ratio"])
	}
	if err := rep.Table("residency").Each(func(r []stats.Value) error {
		tier("residency", r[2])
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	tier("real hit rate", routingHitRate(t, rep, 0))
}

// With snapshots, a token's residency is its snapshot's, and the real hit
// rate counts the picks of the tokens that have one; a token without one
// is NA, saying why.
func TestTheDefaultTierTakesResidencyFromTheRecordersSnapshots(t *testing.T) {
	_, s := computeDefaultTier(t, nil)
	e0 := s.tensors[s.exps[0]].Offset / pg
	// At token 3's start: experts 0 and 2 of layer 0 (two pages each).
	snap := rundir.Snapshot{Token: 3, MarkNS: 2000, StartNS: 2010, EndNS: 2020,
		Models: []*rundir.PageMap{{Resident: 4, Ranges: [][2]int64{{e0, e0 + 2}, {e0 + 4, e0 + 6}}}}}
	rep, _ := computeDefaultTier(t, []rundir.Snapshot{snap})
	r := find(t, rep, "residency", map[string]any{"token": 3, "tensor": "blk.0.ffn_up_exps.weight"})
	if r["resident_pages"].I != 4 || r["resident_pages"].NA != "" {
		t.Errorf("token 3: %v pages resident, want 4 from its snapshot", r["resident_pages"])
	}
	q := find(t, rep, "residency", map[string]any{"token": 3, "tensor": "blk.1.ffn_up_exps.weight"})
	if q["resident_pages"].I != 0 || q["resident_pages"].NA != "" {
		t.Errorf("token 3, layer 1: %v pages resident, want a measured 0", q["resident_pages"])
	}
	tb := rep.Table("residency")
	tok, res := tb.Col("token"), tb.Col("resident_pages")
	if err := tb.Each(func(row []stats.Value) error {
		if row[tok].I == 2 && !strings.Contains(row[res].NA, "no residency snapshot at this token's start") {
			t.Errorf("token 2 has no snapshot: %v", row[res])
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Token 3 picked experts 0 and 2 of layer 0: both resident.
	if v := routingHitRate(t, rep, 0); v.F != 1 || v.NA != "" {
		t.Errorf("layer 0 real hit rate %v, want 1 (2 of 2 picks of token 3)", v)
	}
	if v := routingHitRate(t, rep, 1); v.F != 0 || v.NA != "" {
		t.Errorf("layer 1 real hit rate %v, want 0", v)
	}
}
