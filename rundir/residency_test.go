package rundir_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
)

func TestPageMapHasExactlyItsRanges(t *testing.T) {
	pm := rundir.PageMap{Resident: 5, Ranges: [][2]int64{{2, 4}, {7, 8}, {10, 12}}}
	for p, want := range map[int64]bool{0: false, 1: false, 2: true, 3: true, 4: false, 6: false, 7: true, 8: false, 10: true, 11: true, 12: false, 99: false} {
		if got := pm.Has(p); got != want {
			t.Errorf("page %d: %v, want %v", p, got, want)
		}
	}
}

func TestReadSnapshotsDropsOnlyALastLineCutShort(t *testing.T) {
	line := `{"token":3,"mark_ns":10,"start_ns":15,"end_ns":20,"models":[{"resident_pages":1,"ranges":[[4,5]]},null]}`
	tests := []struct {
		name, file string
		n          int
		err        string
	}{
		{"no file: a run before snapshots", "", 0, ""},
		{"two whole lines", line + "\n" + line + "\n", 2, ""},
		{"the last line cut short", line + "\n" + line[:30], 1, ""},
		{"a bad line before the last", line[:30] + "\n" + line + "\n", 0, "snapshot 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, rundir.ResidencyFile), []byte(tc.file), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			snaps, err := rundir.ReadSnapshots(dir)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want %q", err, tc.err)
			}
			if len(snaps) != tc.n {
				t.Fatalf("%d snapshots, want %d", len(snaps), tc.n)
			}
			if tc.n > 0 {
				s := snaps[0]
				if s.Token != 3 || s.LagNS() != 5 || !s.Models[0].Has(4) || s.Models[1] != nil {
					t.Errorf("snapshot %+v", s)
				}
			}
		})
	}
}

// A token without a snapshot says the share of the run's time its
// recorder kept the snapshots to: the one it wrote, or the 2% of the
// iocorr releases that wrote none.
func TestNoSnapshotNASaysTheRunsOwnDuty(t *testing.T) {
	cases := []struct {
		name string
		st   *rundir.SnapshotStats
		want string
	}{
		{"no snapshots at all", nil, "recorded by an older iocorr"},
		{"a duty written", &rundir.SnapshotStats{Taken: 4, Throttled: 9, DutyShare: 0.01}, "the recorder took 4, keeping to 1% of the run's time: 9 token starts came too soon"},
		{"no duty written", &rundir.SnapshotStats{Taken: 8, Throttled: 9}, "keeping to 2% of the run's time"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := c.st.NoSnapshotNA(); !strings.Contains(got, c.want) {
				t.Errorf("NoSnapshotNA() = %q, want it to contain %q", got, c.want)
			}
		})
	}
}
