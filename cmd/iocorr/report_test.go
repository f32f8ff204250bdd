package main

import (
	"bytes"
	"context"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/sweep"
	"github.com/iocorr/iocorr/testkit/browsertest"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// TestReportOfARealMoERunOpensInChromium: the shared recorded run
// (llama.cpp generating on an MoE model under a memory limit) summed up as a sweep of that run
// and one OOM-killed budget, and reported; the page, opened from disk in
// headless Chromium as a person would, logs no error and draws every
// chart of an MoE run with a sweep at a non-zero size. The screenshot
// goes to $IOCORR_REPORT_SCREENSHOT when set (docs/report.png is one).
func TestReportOfARealMoERunOpensInChromium(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	browsertest.Require(t)
	rec := llmtest.RecordedMoE(t)
	model := rec.Model
	// The shared run stands in the sweep's directory under its budget's name.
	sweepDir := t.TempDir()
	run := filepath.Join(sweepDir, llmtest.MemLimit)
	if err := os.Symlink(rec.Dir, run); err != nil {
		t.Fatal(err)
	}
	row := sweep.Row{Budget: llmtest.MemLimit, MemLimit: llmtest.MemLimitBytes, Status: sweep.StatusOK, RunDir: llmtest.MemLimit}
	if err := sweep.Summarize(run, &row); err != nil {
		t.Fatal(err)
	}
	sum := &sweep.Summary{Command: rec.Command, Cold: true, Rows: []sweep.Row{
		{Budget: "2MiB", MemLimit: 2 << 20, Status: "killed by SIGKILL (OOM: 1 OOM kills in its memory cgroup)", RunDir: "2MiB"}, row}}
	if err := sweep.WriteSummary(sweepDir, sum); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "report.html")
	pngs := filepath.Join(t.TempDir(), "png")
	if _, errOut, err := runCmd(t, "report", "-i", sweepDir, "-o", out, "--png", pngs); err != nil {
		t.Fatalf("report: %v\n%s", err, errOut)
	}
	want := report.ChartNames(true, true)
	for _, n := range want {
		f, err := os.Open(filepath.Join(pngs, n+".png"))
		if err != nil {
			t.Errorf("--png: %v", err)
			continue
		}
		if _, err := png.DecodeConfig(f); err != nil {
			t.Errorf("%s.png: %v", n, err)
		}
		f.Close()
	}
	page, p := checkPage(t, out, []string{filepath.Base(model), llmtest.MemLimit, "2MiB: killed by SIGKILL"},
		browsertest.Options{Width: 1200, Height: 1600}, want)
	cfg, err := png.DecodeConfig(bytes.NewReader(p.Screenshot))
	if err != nil || cfg.Width != 1200 || cfg.Height != 1600 {
		t.Errorf("screenshot %dx%d: %v", cfg.Width, cfg.Height, err)
	}
	shot := filepath.Join(t.TempDir(), "report.png")
	if s := os.Getenv("IOCORR_REPORT_SCREENSHOT"); s != "" {
		shot = s
	}
	if err := os.WriteFile(shot, p.Screenshot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("report %s: %d bytes, %d charts drawn; screenshot %s", out, len(page), len(p.Charts), shot)
}

func TestReportRefusesASweepWithNoRunThatEndedInOrder(t *testing.T) {
	dir := t.TempDir()
	if err := sweep.WriteSummary(dir, &sweep.Summary{Rows: []sweep.Row{{Budget: "2MiB", MemLimit: 2 << 20, Status: "killed by SIGKILL"}}}); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCmd(t, "report", "-i", dir, "-o", filepath.Join(dir, "r.html"))
	if err == nil || !strings.Contains(err.Error(), "no run of the sweep ended in order") {
		t.Fatalf("got %v", err)
	}
}

// checkPage reads the report page out, which must name each of names,
// and opens it in the browser (o), which must log no error and draw each
// chart of charts.
func checkPage(t *testing.T, out string, names []string, o browsertest.Options, charts []string) ([]byte, *browsertest.Page) {
	t.Helper()
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range names {
		if !bytes.Contains(page, []byte(s)) {
			t.Errorf("the page does not name %q", s)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	p, err := browsertest.Open(ctx, out, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Errors) > 0 {
		t.Errorf("the browser logged errors: %q", p.Errors)
	}
	if probs := p.Check(charts); len(probs) > 0 {
		t.Errorf("charts:\n%s", strings.Join(probs, "\n"))
	}
	return page, p
}
