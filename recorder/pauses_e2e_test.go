package recorder_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
// parent could see. The mapper says whether its young thread was still
// untraced when it mapped (on a loaded machine it may have waited out the
// warden's delay before it ran): the counts follow from that. The whole
// family stays held: nothing is taken for a stop from elsewhere.
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
	out := rectest.Record(t, run, rectest.Options{}, append([]string{mapper}, files...)...)
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
	young := strings.TrimSpace(out.Stdout)
	// What the recorder and the warden said is what tells a lost pause's
	// cause apart (the one failure seen before this test said why showed
	// 1 held and 0 not held, and nothing more).
	t.Logf("%s; pauses %+v; warnings %q", young, *p, m.Warnings)
	for _, w := range m.Warnings {
		if strings.Contains(w, "stopped by a signal from elsewhere") {
			t.Errorf("the warden let the family go: %s", w)
		}
	}
	// The mapper's main thread and its old thread are held at least
	// (and the launcher's own pause for its loader's libraries, where
	// the test binary has any).
	switch young {
	case "young free":
		if p.Unheld != 1 || p.Held < 2 {
			t.Errorf("%d pauses not held and %d held, want 1 not held (the thread just started) and the main thread's and the old thread's held", p.Unheld, p.Held)
		}
	case "young seized":
		if p.Unheld != 0 || p.Held < 3 {
			t.Errorf("%d pauses not held and %d held, want none not held (the young thread was seized before it mapped) and at least 3 held", p.Unheld, p.Held)
		}
	case "young changed":
		if int(p.Unheld)+p.Held < 3 {
			t.Errorf("%d pauses not held and %d held, want 3 at least in all", p.Unheld, p.Held)
		}
	default:
		t.Fatalf("the mapper said %q", young)
	}
}

// A program whose other threads map and unmap memory all along (an
// allocator) still has each library it maps held for its probes: the
// kernel side looks the mapping up only if it can take the mmap lock at
// once, and where it cannot, the mmap call's own range stands in. Before
// that, 33 of 40 such mappings went unseen: no pause, no probe, no word.
func TestALibraryMappedWhileAnotherThreadMapsMemoryIsHeldForItsProbes(t *testing.T) {
	testenv.RequireBPF(t)
	churn := llmtest.BuildMapChurn(t)
	dir := t.TempDir()
	const n = 40
	argv := []string{churn}
	for i := range n {
		p := filepath.Join(dir, fmt.Sprintf("lib%d", i))
		if err := os.WriteFile(p, make([]byte, 4096), 0o644); err != nil {
			t.Fatal(err)
		}
		argv = append(argv, p)
	}
	run := filepath.Join(dir, "run")
	out := rectest.Record(t, run, rectest.Options{}, argv...)
	m, err := rundir.ReadMeta(run)
	if err != nil {
		t.Fatal(err)
	}
	if m.Child.ExitCode != 0 {
		t.Fatalf("the mapper did not exit 0: %+v", m.Child)
	}
	rounds, err := strconv.Atoi(strings.TrimSpace(out.Stdout))
	if err != nil || rounds == 0 {
		t.Fatalf("the mapper said %q: no churn while it mapped", out.Stdout)
	}
	t.Logf("%d map-and-unmap rounds while mapping; pauses %+v", rounds, *m.Pauses)
	if p := m.Pauses; p == nil || !p.Invisible || p.Held < n || p.Unheld != 0 {
		t.Errorf("pauses %+v, want each of the %d files held", p, n)
	}
}
