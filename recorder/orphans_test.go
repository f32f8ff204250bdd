package recorder

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestRunReapsTheOrphansOfTheCommandWithTheirRusage records a wrapper
// that double-forks the page toucher and exits before it starts: the
// toucher is orphaned, and without iocorr as the family's subreaper its
// exit and rusage would go to init. The recording lasts until the orphan
// ends; its major faults (it touches cold pages of a file, one major
// fault each) are in the run, and the run's major faults, every process
// of the family's, equal the family's rusage majflt (the wrapper's own,
// and the orphan's, reaped by iocorr). A direct run of the same toucher
// has no orphan and the same equality.
func TestRunReapsTheOrphansOfTheCommandWithTheirRusage(t *testing.T) {
	testenv.RequireBPF(t)
	toucher := llmtest.BuildToucher(t)
	// On the package's disk (testenv.DiskFile): os.TempDir may be tmpfs,
	// where no fault is major.
	file := testenv.RandomDiskFile(t, 64*os.Getpagesize())
	// Its report (its own rusage) says how many of the 8 pages were
	// read in by its faults: one can be resident again by then (a page
	// of the file brought in around another fault).
	report := filepath.Join(t.TempDir(), "touch.json")
	touch := fmt.Sprintf("'%s' -file '%s' -pages 1,7,9,20,33,41,50,62 -evict >'%s'", toucher, file, report)
	tests := []struct {
		name    string
		argv    []string
		orphans int
	}{
		{"direct", []string{"sh", "-c", touch}, 0},
		// The subshell forks, the wrapper exits at once; the subshell
		// waits for the wrapper to be gone, then becomes the toucher.
		{"double-forked, the wrapper gone first", []string{"sh", "-c", fmt.Sprintf("(while kill -0 $$ 2>/dev/null; do sleep 0.05; done; exec %s) & exit 0", touch)}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			o, out := cliOptions(dir, tc.argv...)
			if _, err := Run(t.Context(), o); err != nil {
				t.Fatalf("record: %v\n%s", err, out)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Family == nil || len(m.Family.Orphans) != tc.orphans || len(m.Family.LeftRunning) != 0 {
				t.Fatalf("family %+v: want %d orphans reaped, none left running\n%s", m.Family, tc.orphans, out)
			}
			var major uint64
			byPID := map[uint32]uint64{}
			spooltest.Faults(t, dir, func(h *wire.EventHdr, class uint8, n uint64, _ *wire.FaultEvent) {
				if class == uint8(wire.FaultClassFAULT_MAJOR) {
					major += n
					byPID[h.Tgid] += n
				}
			})
			spooltest.CheckNothingLost(t, m.Lost)
			var rep struct {
				MajFlt uint64 `json:"majflt"`
			}
			if b, err := os.ReadFile(report); err != nil || json.Unmarshal(b, &rep) != nil || rep.MajFlt == 0 {
				t.Fatalf("the toucher's report %q: %v", b, err)
			}
			if major != uint64(m.Child.MajFlt) || major < rep.MajFlt {
				t.Errorf("major faults recorded %d (by process %v), the family's rusage majflt %d: want equal, and the toucher's %d among them",
					major, byPID, m.Child.MajFlt, rep.MajFlt)
			}
			for _, pid := range m.Family.Orphans {
				if byPID[uint32(pid)] < rep.MajFlt {
					t.Errorf("orphan %d: %d major faults recorded, want the toucher's %d", pid, byPID[uint32(pid)], rep.MajFlt)
				}
			}
			t.Logf("%s: %d major faults recorded (by process %v), rusage majflt %d, orphans %v", tc.name, major, byPID, m.Child.MajFlt, m.Family.Orphans)
		})
	}
}
