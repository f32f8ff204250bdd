package main

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
)

// A run of the default tier: query and the exports leave the page-cache
// counters out (or NA), saying why beside the rows, and the counters it
// measured as they are.
func TestQueryAndExportsOfTheDefaultTierSayWhyPageCountersAreNA(t *testing.T) {
	dir := defaultTierRun(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"query", []string{"query", "-i", dir, "--tensor", "blk.*.ffn_down.weight"}},
		{"export faults-per-token", []string{"export", "-i", dir, "faults-per-token"}},
		{"export faults-per-token-tensor", []string{"export", "-i", dir, "faults-per-token-tensor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkUnmeasured(t, tc.args, rundir.PageCacheCounters, "faults", "--probe pagecache")
			if tc.args[0] == "query" {
				_, _, err := runCmd(t, append(tc.args, "--sort", "pages_added")...)
				if err == nil || !strings.Contains(err.Error(), "--sort pages_added: not measured") {
					t.Errorf("query --sort by an unmeasured counter: %v", err)
				}
			}
		})
	}
}
