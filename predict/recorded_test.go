package predict_test

import (
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/predict"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The recorder re-executes this test binary as the held child.
func TestMain(m *testing.M) { rectest.Main(m) }

// A real llama.cpp run whose budget holds the whole model beside the
// command's other memory: llama.cpp reads the file once at its load
// (MAP_POPULATE), so the kernel reads nothing in any call. That is the
// kernel's own answer, exact, and the prediction at that budget must be
// it, for every policy; the run's picks make the stream (no NA).
func TestAtABudgetHoldingTheModelThePredictionEqualsTheRunsZeroBytes(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, llmtest.PageableMoE)
	dir := filepath.Join(t.TempDir(), "run")
	const budget = 256 << 20
	cmd := llmtest.Command(t.Context(), model, llmtest.Options{Tokens: 4, Threads: 2})
	// Exact snapshots: every call gets one at its start, so the non-file
	// memory is measured however fast the tokens come (the default's are
	// throttled and a 4-token run in RAM can end before a decode call has
	// one).
	rectest.Record(t, dir, rectest.Options{Cold: true, MemLimit: "256MiB", Set: func(o *recorder.Options) {
		o.Models, o.ExactSnapshots = []string{model}, true
	}}, cmd.Args...)
	st, meta := storetest.OpenRun(t, dir)
	snaps, err := rundir.ReadSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	res, err := predict.Compute(st, meta, snaps, predict.Options{Budgets: []int64{budget}})
	if err != nil {
		t.Fatal(err)
	}
	measured := map[string]float64{}
	for _, r := range res.Rows {
		if r.Policy == predict.PolicyRun {
			if why := r.NA[predict.ColBytes]; why != "" {
				t.Fatalf("the run's %s bytes are NA: %s", r.Phase, why)
			}
			measured[r.Phase] = r.BytesReadPerToken
		}
	}
	if measured["decode"] != 0 {
		t.Fatalf("the run read %.0f bytes per decode call under a budget holding the model: not the case this test is for", measured["decode"])
	}
	seen := 0
	for _, r := range res.Rows {
		if r.Policy == predict.PolicyRun || r.Phase != "decode" {
			continue
		}
		seen++
		if why := r.NA[predict.ColBytes]; why != "" {
			t.Errorf("%s: NA: %s", r.Policy, why)
		} else if r.BytesReadPerToken != measured[r.Phase] || r.MajorFaultsPerToken != 0 {
			t.Errorf("%s %s: predicted %.0f bytes, %.2f major faults per call; the run read %.0f", r.Policy, r.Phase, r.BytesReadPerToken, r.MajorFaultsPerToken, measured[r.Phase])
		}
	}
	if seen != 2 {
		t.Errorf("%d decode predictions, want the kernel's and Belady's", seen)
	}
}
