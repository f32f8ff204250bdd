//go:build linux

package main

// The comparisons of two real runs of different models (rectest.RecordedPair
// records them, on Linux); the same commands over the tiny run are in
// diff_test.go and diff_report_test.go.

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/testkit/browsertest"
	"github.com/iocorr/iocorr/testkit/rectest"
)

// TestDiffOfRunsOfDifferentModelsSaysWhichTensorsOnlyOneHas: the tensors
// of the shared run's model that smallerMoE has not (layers 6 and 7) are
// named, with their count, after the table and on stderr beside JSON, and
// every row of theirs has b NA.
func TestDiffOfRunsOfDifferentModelsSaysWhichTensorsOnlyOneHas(t *testing.T) {
	a, b, modelA, modelB := rectest.RecordedPair(t)
	namesA, namesB := rectest.TensorNames(t, modelA), rectest.TensorNames(t, modelB)
	var only []string
	for n := range namesA {
		if !namesB[n] {
			only = append(only, n)
		}
	}
	if len(only) == 0 {
		t.Fatal("the models have the same tensors")
	}
	for n := range namesB {
		if !namesA[n] {
			t.Fatalf("%s is only in B's model", n)
		}
	}
	line := fmt.Sprintf("only in run A: %d tensors: ", len(only))
	out, _, err := runCmd(t, "diff", a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, line) || !strings.Contains(out, "blk.6.") || strings.Contains(out, "only in run B") {
		t.Errorf("the table does not say %q:\n%s", line, out)
	}
	if !strings.Contains(out, "NA: run B: the tensor is not in run B's model") {
		t.Errorf("the table does not give the NA's reason:\n%s", out)
	}
	_, errOut, err := runCmd(t, "diff", "--format", "csv", a, b)
	if err != nil || !strings.Contains(errOut, "iocorr: note: "+line) {
		t.Errorf("stderr beside CSV %q (%v), want a note %q", errOut, err, line)
	}
	nonly := map[string]bool{}
	for _, r := range jsonRows(t, "diff", "--tensor", "blk.*", a, b) {
		name := r["tensor"].(string)
		if !slices.Contains(only, name) {
			continue
		}
		nonly[name] = true
		if r["in"] != "a" || r["b"] != nil || r["na_reason"] != "run B: the tensor is not in run B's model" {
			t.Errorf("%s %s: in %v, b %v, reason %v", name, r["counter"], r["in"], r["b"], r["na_reason"])
		}
	}
	if len(nonly) == 0 {
		t.Error("no row of a tensor only A has: layers 6-7 read nothing?")
	}
	t.Logf("%d tensors only in A, %d of them with rows", len(only), len(nonly))
}

// TestReportOfTwoRecordedRunsOpensInChromiumWithBothRunsFigures: `iocorr
// report A B` of two real runs of different models, opened from disk in
// headless Chromium, logs no error and draws the comparisons and both
// runs' own charts at a non-zero size; the page names both models and the
// tensors only A's has. The screenshot goes to $IOCORR_PAIR_SCREENSHOT
// when set.
func TestReportOfTwoRecordedRunsOpensInChromiumWithBothRunsFigures(t *testing.T) {
	a, b, modelA, modelB := rectest.RecordedPair(t)
	browsertest.Require(t)
	out := filepath.Join(t.TempDir(), "pair.html")
	stdoutText, errOut, err := runCmd(t, "report", "-o", out, a, b)
	if err != nil {
		t.Fatalf("report A B: %v\n%s", err, errOut)
	}
	page, p := checkPage(t, out, []string{filepath.Base(modelA), filepath.Base(modelB), a, b, "only in run A: 20 tensors: blk.6."},
		browsertest.Options{Width: 1400, Height: 2400}, report.PairChartNames(true, true))
	if s := os.Getenv("IOCORR_PAIR_SCREENSHOT"); s != "" {
		if err := os.WriteFile(s, p.Screenshot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: %d bytes, %d charts drawn", strings.TrimSpace(stdoutText), len(page), len(p.Charts))
}
