package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/runtest"
)

// A run that counted the faults outside the model files in the kernel has
// no row, and no instant, for each of them: the events export and the
// Perfetto trace say so, and why, on stderr (and the export in its
// sidecar); a run that recorded them one by one says nothing of it.
func TestOutputsOfEachFaultSayWhyFaultsCountedInTheKernelAreNotThere(t *testing.T) {
	for _, counted := range []bool{true, false} {
		dir := runtest.TinyRun(t)
		m, err := rundir.ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		if counted {
			m.FaultsCounted = "anonymous memory, files that are no model"
		}
		if err := rundir.WriteMeta(dir, m); err != nil {
			t.Fatal(err)
		}
		why := m.FaultDetailNA()
		if (why != "") != counted {
			t.Fatalf("FaultDetailNA %q for a run that counted faults in the kernel: %v", why, counted)
		}
		out := filepath.Join(t.TempDir(), "events.csv")
		_, errOut, err := runCmd(t, "export", "-i", dir, "events", "--format", "csv", "-o", out)
		if err != nil {
			t.Fatal(err)
		}
		side := readSidecar(t, output.SidecarPath(out))
		said := strings.Count(errOut, "each fault outside the model files")
		if counted && (said != 1 || !strings.Contains(side.RowsNA, why)) || !counted && (said != 0 || side.RowsNA != "") {
			t.Errorf("counted %v: export events said it %d times on stderr, sidecar rows_na %q; want once and the reason %q, or nothing", counted, said, side.RowsNA, why)
		}
		_, errOut, err = runCmd(t, "export", "-i", dir, "perfetto", "-o", filepath.Join(t.TempDir(), "trace.pftrace"))
		if err != nil {
			t.Fatal(err)
		}
		if counted && !strings.Contains(errOut, why) || !counted && strings.Contains(errOut, "outside the model files") {
			t.Errorf("counted %v: export perfetto's stderr:\n%s", counted, errOut)
		}
	}
}
