package bench

import (
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The scale section records two run lengths of real llama.cpp and gives,
// for each, the records, the store and every command's peak RSS and
// time, then each command's growth per record: every figure measured
// (none NA), each RSS judged against the bound, and the longer run with
// more records than the shorter.
func TestScaleSectionMeasuresEveryCommandAtTwoRunLengths(t *testing.T) {
	cfg := Config{Iocorr: buildIocorr(t), LlamaBench: llmtest.CLI(t, llmtest.Shared, "llama-bench"), WorkDir: t.TempDir(),
		Threads: 2, MemLimit: 128 << 20, ScaleTokens: []int{2, 4}}
	model := benchModel(t)
	r := &Report{}
	Scale(r, cfg, model)
	var records []float64
	rss, growth := 0, 0
	for _, f := range r.Figures {
		if f.NA != "" {
			t.Errorf("%s: NA: %s", f.Name, f.NA)
			continue
		}
		switch {
		case strings.HasPrefix(f.Name, "records, "):
			records = append(records, f.Median)
		case strings.Contains(f.Name, "peak RSS,"):
			rss++
			if f.Target == nil || f.Target.Met == nil || !*f.Target.Met {
				t.Errorf("%s: %.1f MiB, target %v", f.Name, f.Median, f.Target)
			}
		case strings.Contains(f.Name, "peak RSS growth"):
			growth++
		}
	}
	if len(records) != 2 || records[1] <= records[0] {
		t.Errorf("records per run %v, want two, the longer run's more", records)
	}
	if want := 2 * len(scaleCommands); rss != want || growth != len(scaleCommands) {
		t.Errorf("%d peak RSS figures and %d growths, want %d and %d", rss, growth, want, len(scaleCommands))
	}
}

// The sweep section runs iocorr sweep and plain runs of real
// llama-completion under the limit, round by round: every figure
// measured, positive, and the sweep's untraced tokens/s judged against
// the plain runs' spread.
func TestSweepSectionComparesTheSweepsUntracedRunsWithPlainOnes(t *testing.T) {
	cfg := Config{Iocorr: buildIocorr(t), LlamaBench: llmtest.CLI(t, llmtest.Shared, "llama-bench"), WorkDir: t.TempDir(),
		Pairs: 2, Tokens: 4, Threads: 2, MemLimit: 128 << 20, Log: io.Discard}
	model := benchModel(t)
	r := &Report{}
	SweepUntraced(r, cfg, model)
	judged := false
	for _, f := range r.Figures {
		t.Logf("%s: median %.3f (%.3f–%.3f) %v", f.Name, f.Median, f.Min, f.Max, f.Target)
		if f.NA != "" || f.N != cfg.Pairs || f.Min <= 0 {
			t.Errorf("%s: NA %q, %d samples, min %v: want %d positive samples", f.Name, f.NA, f.N, f.Min, cfg.Pairs)
		}
		if f.Target != nil {
			judged = f.Target.Met != nil
		}
	}
	if len(r.Figures) != 5 || !judged {
		t.Errorf("%d figures, judged %v: want 5, the sweep's untraced against the plain runs judged", len(r.Figures), judged)
	}
}

// buildIocorr builds the iocorr a section runs, for a test that may load
// BPF programs.
func buildIocorr(t *testing.T) string {
	t.Helper()
	testenv.RequireBPF(t)
	bin := filepath.Join(t.TempDir(), "iocorr")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/iocorr").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// benchModel is the demo's model, as make bench makes it.
func benchModel(t *testing.T) string {
	return llmtest.Model(t, gguf.SynthSpec{Layers: 8, Embd: 768, FF: 1024, Heads: 12, Experts: 8, ExpertsUsed: 2, Type: llmtest.WeightType})
}
