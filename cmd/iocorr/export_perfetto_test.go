package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/perfetto"
	"github.com/iocorr/iocorr/testkit/runtest"
)

// `export perfetto` writes to its -o file the bytes perfetto.WriteFile
// writes of the run (perfetto's tests hold those to the store), and
// refuses stdout and --format: the trace is binary, and its own format.
func TestExportPerfettoWritesTheTraceAndRefusesStdoutAndFormat(t *testing.T) {
	dir := runtest.TinyRun(t)
	path := filepath.Join(t.TempDir(), "trace.pftrace")
	if _, errOut, err := runCmd(t, "export", "-i", dir, "perfetto", "-o", path); err != nil {
		t.Fatalf("export perfetto: %v\n%s", err, errOut)
	}
	run, err := openRun(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	want := filepath.Join(t.TempDir(), "want.pftrace")
	if _, err := perfetto.WriteFile(want, run, perfetto.Options{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	wantB, _ := os.ReadFile(want)
	if len(got) == 0 || !bytes.Equal(got, wantB) {
		t.Errorf("export perfetto wrote %d bytes, not the %d of perfetto.WriteFile", len(got), len(wantB))
	}
	for _, bad := range [][]string{{"-o", "-"}, {"-o", path, "--format", "csv"}} {
		if _, _, err := runCmd(t, append([]string{"export", "-i", dir, "perfetto"}, bad...)...); err == nil {
			t.Errorf("export perfetto %v: no error", bad)
		}
	}
}
