package recorder_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The warden seizes a thread a little after it starts instead of stopping
// every clone: a mapping of new code by the main thread, or by a thread
// that has run a second, is held for its uprobe attach; one by a thread
// that has just started is not held, and is counted, never a stop its
// parent could see.
func TestPausesAreHeldInSeizedThreadsAndCountedInThreadsJustStarted(t *testing.T) {
	testenv.RequireBPF(t)
	mapper := llmtest.BuildExecMapper(t)
	dir := t.TempDir()
	var files []string
	for _, name := range []string{"main", "young", "old"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, p)
	}
	run := filepath.Join(dir, "run")
	rectest.Record(t, run, rectest.Options{}, append([]string{mapper}, files...)...)
	m, err := rundir.ReadMeta(run)
	if err != nil {
		t.Fatal(err)
	}
	if m.Child.ExitCode != 0 {
		t.Fatalf("the mapper did not exit 0: %+v", m.Child)
	}
	p := m.Pauses
	if p == nil || !p.Invisible {
		t.Fatalf("pauses %+v, want them held invisibly by the warden", p)
	}
	if p.Unheld != 1 {
		t.Errorf("%d pauses not held, want 1 (the thread just started)", p.Unheld)
	}
	// The mapper's own binary and libraries are held too: at least the
	// main thread's and the old thread's mappings.
	if p.Held < 2 {
		t.Errorf("%d pauses held, want the main thread's and the old thread's at least", p.Held)
	}
}
