package main

import (
	"encoding/csv"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/rundir"
)

// A run of the default tier: query and the exports leave the page-cache
// counters NA, each format saying why, and the counters it measured as
// they are.
func TestQueryAndExportsOfTheDefaultTierSayWhyPageCountersAreNA(t *testing.T) {
	dir := rectest.TinyRun(t)
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	meta.Tier = rundir.TierDefault
	for i := range meta.Probes {
		if meta.Probes[i].Target == rundir.TracepointPageAdd {
			meta.Probes[i].Error = "not attached: the default tier"
		}
	}
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"query", []string{"query", "-i", dir, "--tensor", "blk.*.ffn_down.weight"}},
		{"export faults-per-token", []string{"export", "-i", dir, "faults-per-token"}},
		{"export faults-per-token-tensor", []string{"export", "-i", dir, "faults-per-token-tensor"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, err := runCmd(t, append(tc.args, "--format", "csv")...)
			if err != nil {
				t.Fatal(err)
			}
			r := csv.NewReader(strings.NewReader(out))
			r.Comment = '#'
			recs, err := r.ReadAll()
			if err != nil || len(recs) < 2 {
				t.Fatalf("bad CSV (%v):\n%s", err, out)
			}
			for _, rec := range recs[1:] {
				for i, col := range recs[0] {
					switch {
					case slices.Contains(rundir.PageCacheCounters, col) && rec[i] != "":
						t.Errorf("%s = %q, want NA (empty)", col, rec[i])
					case col == "faults" && rec[i] == "":
						t.Errorf("faults NA: the default tier measures them")
					}
				}
			}
			for _, col := range rundir.PageCacheCounters {
				if !strings.Contains(out, "# "+col+" NA: not measured: page-cache adds") {
					t.Errorf("the CSV does not say why %s is NA:\n%s", col, out)
				}
			}
			if !strings.Contains(errOut, "--probe pagecache") {
				t.Errorf("stderr does not say how to measure them: %q", errOut)
			}
			if tc.args[0] == "query" {
				_, _, err := runCmd(t, append(tc.args, "--sort", "pages_added")...)
				if err == nil || !strings.Contains(err.Error(), "--sort pages_added: not measured") {
					t.Errorf("query --sort by an unmeasured counter: %v", err)
				}
			}
			js, _, err := runCmd(t, append(tc.args, "--format", "jsonl")...)
			if err != nil {
				t.Fatal(err)
			}
			var row map[string]any
			if err := json.Unmarshal([]byte(strings.SplitN(js, "\n", 2)[0]), &row); err != nil {
				t.Fatal(err)
			}
			if row["pages_added"] != nil || !strings.Contains(row["pages_added_na_reason"].(string), "--probe pagecache") {
				t.Errorf("JSON row: pages_added %v, reason %v", row["pages_added"], row["pages_added_na_reason"])
			}
		})
	}
}
