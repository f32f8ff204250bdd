package stats_test

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// Compute makes NA, with the capability's reason, every column of
// CounterFigures fed by a counter the run's kernel gave no path, and only
// those: the report, a diff's report and a sweep's summary take their
// figures from Compute, so none of them can show the store's zeros.
func TestComputeMakesNAEveryFigureOfACapabilityTheKernelLacked(t *testing.T) {
	for _, tc := range []struct {
		capability string
		counters   []string
	}{
		{rundir.CapBlock, []string{"bytes_read", "block_requests"}},
		{rundir.CapFaults, []string{"faults", "major_faults", "fault_stall_ns"}},
	} {
		t.Run(tc.capability, func(t *testing.T) {
			dir, s := buildScripted(t)
			s.meta.Capabilities = []rundir.Capability{{Name: tc.capability, Why: "forced absent"}}
			if err := rundir.WriteMeta(dir, s.meta); err != nil {
				t.Fatal(err)
			}
			rep, err := stats.Compute(storetest.OpenRun(t, dir), stats.Options{})
			if err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, f := range stats.CounterFigures {
				tb := rep.Table(f.Table)
				if tb == nil {
					t.Errorf("stats has no table %s (CounterFigures names it)", f.Table)
					continue
				}
				fed := false
				for _, c := range f.Counters {
					for _, n := range tc.counters {
						fed = fed || c == n
					}
				}
				for ci, col := range tb.Columns {
					if !f.Matches(col.Name) {
						continue
					}
					for _, row := range tb.Rows {
						if f.Row != "" && row[0].S != f.Row {
							continue
						}
						na := strings.Contains(row[ci].NA, "gave the "+tc.capability+" capability no path")
						if fed != na {
							t.Errorf("%s.%s: NA %q, want NA %v", f.Table, col.Name, row[ci].NA, fed)
						}
						checked++
					}
				}
			}
			if checked == 0 {
				t.Error("no figure checked")
			}
		})
	}
}
