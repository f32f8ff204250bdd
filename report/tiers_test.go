package report_test

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/report"
)

// The sweep's tokens/s chart is the untraced runs' speed (the study's
// figure), not the traced runs'.
func TestSweepChartPlotsTheUntracedTokensPerS(t *testing.T) {
	rep := buildReport(t, synth{layers: 2, experts: 4, tokens: 6}.build(t), report.Options{Sweep: sweepSummary})
	svg := chartSVG(t, rep.Charts, "sweep_tokens_per_s")
	for _, want := range []string{"96MiB: 2.6 tokens/s", "128MiB: 21 tokens/s"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the chart has no point %q", want)
		}
	}
	if strings.Contains(svg, "96MiB: 2.5 tokens/s") {
		t.Error("the chart plots the traced speed")
	}
}
