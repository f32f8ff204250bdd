package pipeline_test

import (
	"os"
	"testing"

	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// TestARealRunsQueriesEqualItsRowsPerTokenSummedByHand: on the shared recorded
// run (an MoE model under memory pressure: prefill, decode, the load's
// token 0, the router's picks), every query that needs no token apart,
// answered from the store's totals by phase, equals the same query over
// every token and the rows per token summed by hand, as do queries of
// token ranges (storetest.CheckQueries).
// IOCORR_TOTALS_RUN names another ingested run directory to check instead
// (the bench's a3b run: 48 layers of 128 experts).
func TestARealRunsQueriesEqualItsRowsPerTokenSummedByHand(t *testing.T) {
	dir := os.Getenv("IOCORR_TOTALS_RUN")
	if dir == "" {
		testenv.RequireBPF(t)
		llmtest.Require(t)
		dir = llmtest.RecordedMoE(t).Dir
	}
	st := storetest.Open(t, dir)
	n := storetest.CheckQueries(t, st)
	t.Logf("%d queries compared on %s", n, dir)
}
