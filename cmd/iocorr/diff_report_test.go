package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/testkit/browsertest"
	"github.com/iocorr/iocorr/testkit/rectest"
)

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
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{filepath.Base(modelA), filepath.Base(modelB), a, b, "only in run A: 20 tensors: blk.6."} {
		if !bytes.Contains(page, []byte(s)) {
			t.Errorf("the page does not name %q", s)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p, err := browsertest.Open(ctx, out, browsertest.Options{Width: 1400, Height: 2400})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Errors) > 0 {
		t.Errorf("the browser logged errors: %q", p.Errors)
	}
	if probs := p.Check(report.PairChartNames(true, true)); len(probs) > 0 {
		t.Errorf("charts:\n%s", strings.Join(probs, "\n"))
	}
	if s := os.Getenv("IOCORR_PAIR_SCREENSHOT"); s != "" {
		if err := os.WriteFile(s, p.Screenshot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%s: %d bytes, %d charts drawn", strings.TrimSpace(stdoutText), len(page), len(p.Charts))
}

func TestReportOfTwoRunsBadUsageIsOneLineError(t *testing.T) {
	a := rectest.TinyRun(t)
	out := filepath.Join(t.TempDir(), "r.html")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"one argument", []string{a}, "one run (-i DIR) or two side by side (A B)"},
		{"three arguments", []string{a, a, a}, "one run (-i DIR) or two side by side (A B)"},
		{"-i and two runs", []string{"-i", a, a, a}, "one run (-i DIR) or two side by side (A B)"},
		{"B is no run", []string{a, t.TempDir()}, "is not a run directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"report", "-o", out}, tc.args...)...)
			if err == nil || !strings.HasPrefix(err.Error(), "report: ") || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("got %v, want one line starting \"report: \" containing %q", err, tc.want)
			}
		})
	}
}
