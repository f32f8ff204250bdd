package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/testkit/runtest"
)

// predict over a run recorded without a memory limit: the run's own row
// is measured, and every predicted figure is NA with the reason (its
// non-file memory under a budget was never measured), in JSON as null
// with the reason on stderr: never a zero. plan over it refuses in one line and
// writes no file.
func TestPredictAndPlanSayWhyARunWithoutALimitPredictsNothing(t *testing.T) {
	dir := runtest.TinyRun(t)
	out, errOut, err := runCmd(t, "predict", "-i", dir, "--mem-limit", "96MiB,128MiB", "--format", "json")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var rows []map[string]any
	if err := json.Unmarshal([]byte(out), &rows); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	predicted := 0
	for _, r := range rows {
		if r["policy"] == "run" {
			continue
		}
		predicted++
		// Why: in its row where the rows' reasons differ, else once on stderr.
		why, perRow := r["bytes_read_per_token_na_reason"].(string)
		if !perRow {
			why = errOut
		}
		if r["bytes_read_per_token"] != nil || !strings.Contains(why, "no memory limit") {
			t.Errorf("%v %v at %v: bytes %v, reason %q; want null and why", r["policy"], r["phase"], r["budget_bytes"], r["bytes_read_per_token"], why)
		}
	}
	if predicted != 2*2*2 { // two budgets × kernel, belady × prefill, decode
		t.Errorf("%d predicted rows, want 8", predicted)
	}

	plan := filepath.Join(t.TempDir(), "plan.json")
	_, errOut, err = runCmd(t, "plan", "-i", dir, "--mem-limit", "96MiB", "-o", plan)
	if err == nil || !strings.Contains(err.Error(), "no memory limit") || strings.Count(strings.TrimSpace(err.Error()), "\n") > 0 {
		t.Errorf("plan said %v (stderr %q), want one line saying why", err, errOut)
	}
	if _, statErr := os.Stat(plan); !os.IsNotExist(statErr) {
		t.Errorf("plan wrote %s: %v", plan, statErr)
	}
}

func TestPredictRefusesBadInputInOneLine(t *testing.T) {
	dir := runtest.TinyRun(t)
	other := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(other, []byte(`{"model":{"path":"/elsewhere.gguf","size":1,"tensors":1,"tensor_table_sha256":"00"},"budget_bytes":1,"pinned_bytes":0,"ranges":[],"recommendation":"pin nothing"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		says string
	}{
		{"no budget", []string{"predict", "-i", dir}, "--mem-limit"},
		{"a budget that is no size", []string{"predict", "-i", dir, "--mem-limit", "lots"}, "lots"},
		{"a read-around that is no size", []string{"predict", "-i", dir, "--mem-limit", "96MiB", "--readahead", "-4KiB"}, "--readahead"},
		{"a plan for another model", []string{"predict", "-i", dir, "--mem-limit", "96MiB", "--plan", other}, "for another model file"},
		{"a prefetch that is no policy", []string{"predict", "-i", dir, "--mem-limit", "96MiB", "--prefetch", "everything"}, "--prefetch"},
		{"a plan's read-around that is no size", []string{"plan", "-i", dir, "--mem-limit", "96MiB", "--readahead", "0", "-o", filepath.Join(t.TempDir(), "p.json")}, "--readahead"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(strings.TrimSpace(err.Error()), "\n") {
				t.Errorf("said %v, want one line naming %q", err, tc.says)
			}
			if out != "" {
				t.Errorf("wrote %q to stdout", out)
			}
		})
	}
}
