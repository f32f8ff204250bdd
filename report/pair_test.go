package report_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/testkit/browsertest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// pairRun opens the run in dir for a two-run report; the store is closed
// when the test ends.
func pairRun(t *testing.T, dir string) report.PairRun {
	t.Helper()
	run := storetest.OpenRun(t, dir)
	sr, err := stats.Compute(run, stats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return report.PairRun{Run: run, Stats: sr}
}

// buildPair reports A, 4 layers of 8 experts over 12 tokens, against B,
// 3 layers of 4 experts over 9 tokens, and writes the page.
func buildPair(t *testing.T) (*report.Pair, []byte) {
	t.Helper()
	a := pairRun(t, synth{layers: 4, experts: 8, tokens: 12}.build(t))
	b := pairRun(t, synth{layers: 3, experts: 4, tokens: 9}.build(t))
	p, err := report.BuildPair(a, b)
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := p.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	return p, page.Bytes()
}

// TestTwoRunReportComparesEachLayerWithBothValuesOnHover: token i reads
// one page of layer i%layers' attn_q and two pages of one expert, the load
// read token_embd (layer none): 36 KiB per layer in both runs, 32 KiB in
// layer none; layer 3 is only in A's model, so B's value there is NA with
// the reason, not a bar of zero.
func TestTwoRunReportComparesEachLayerWithBothValuesOnHover(t *testing.T) {
	p, page := buildPair(t)
	svg := chartSVG(t, p.Charts, "diff_layer_bytes_read")
	for _, want := range []string{
		"<title>layer none: run A 32.0 KiB, run B 32.0 KiB; change 0 B, ratio B/A 1</title>",
		"<title>layer 0: run A 36.0 KiB, run B 36.0 KiB; change 0 B, ratio B/A 1</title>",
		"<title>layer 2: run A 36.0 KiB, run B 36.0 KiB; change 0 B, ratio B/A 1</title>",
		template("<title>layer 3: run A 36.0 KiB, run B NA (run B's model has layers 0-2)</title>"),
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("the layer comparison lacks %q", want)
		}
	}
	for _, want := range []string{"only in run A: 8 tensors: blk.3.attn_q.weight", `title="run B: run B&#39;s model has layers 0-2">NA</td>`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

// TestTwoRunReportOpensInChromiumWithBothRunsChartsDrawn: the page,
// opened from disk in headless Chromium, logs no error and draws the
// comparisons and both runs' charts side by side at a non-zero size.
func TestTwoRunReportOpensInChromiumWithBothRunsChartsDrawn(t *testing.T) {
	browsertest.Require(t)
	_, page := buildPair(t)
	pg := openInBrowser(t, page)
	if len(pg.Errors) > 0 {
		t.Errorf("the browser logged errors: %q", pg.Errors)
	}
	if probs := pg.Check(report.PairChartNames(true, true)); len(probs) > 0 {
		t.Errorf("charts: %q", probs)
	}
}
