package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/testkit/runtest"
)

func TestDiffBadUsageIsOneLineError(t *testing.T) {
	a, b := runtest.TinyRun(t), runtest.TinyRun(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no runs", nil, "want two run directories, A (the baseline) and B, got 0 arguments"},
		{"one run", []string{a}, "got 1 arguments"},
		{"three runs", []string{a, b, a}, "got 3 arguments"},
		{"unknown group", []string{"--by", "colour", a, b}, `cannot compare by "colour"`},
		{"unknown counter", []string{"--counter", "faults,speed", a, b}, `unknown counter "speed"`},
		{"picks outside --by expert", []string{"--counter", "selected", a, b}, "only compared by expert"},
		{"sort by a counter not compared", []string{"--counter", "faults", "--sort", "bytes_read", a, b}, `cannot sort by "bytes_read"`},
		{"negative top", []string{"--top", "-2", a, b}, "--top must not be negative"},
		{"unknown phase", []string{"--phase", "warmup", a, b}, "unknown phase"},
		{"a tensor neither run has", []string{"--tensor", "blk.7.*", a, b}, `no tensor of either run matches "blk.7.*"`},
		{"bad format", []string{"--format", "xml", a, b}, `unknown format "xml"`},
		{"A is no run", []string{t.TempDir(), b}, "is not a run directory"},
		{"B does not exist", []string{a, "/nonexistent"}, "/nonexistent is not a run directory (no meta.json)"},
		{"B not yet ingested", []string{a, notIngested(t)}, "no store: run `iocorr ingest` first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"diff"}, tc.args...)...)
			requireOneLineError(t, err, "diff", tc.want)
		})
	}
}

// TestDiffOfAnUnfinishedRunSaysWhichRunInEveryOutput: B's recorder did
// not finish; stderr names run B and its directory, CSV starts with a
// comment and every JSON row carries it, prefixed "run B: ".
func TestDiffOfAnUnfinishedRunSaysWhichRunInEveryOutput(t *testing.T) {
	a, b := runtest.TinyRun(t), runtest.TinyRun(t)
	meta := unfinish(t, b)
	status := "run B: " + meta.Status()
	for _, format := range []string{"table", "csv", "json"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, err := runCmd(t, "diff", "--format", format, a, b)
			if err != nil {
				t.Fatal(err)
			}
			if want := "iocorr: warning: run B (" + b + "): " + meta.Status(); !strings.Contains(errOut, want) || strings.Contains(errOut, "run A (") {
				t.Errorf("stderr %q, want %q", errOut, want)
			}
			switch format {
			case "csv":
				// RFC 4180 has no comments: the status is stderr's.
				if !strings.HasPrefix(out, "tensor,") || strings.Contains(out, status) {
					t.Errorf("CSV does not start with its header, or carries the status:\n%s", out)
				}
			case "json":
				var rows []map[string]any
				if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) == 0 {
					t.Fatalf("%d rows, %v", len(rows), err)
				}
				for _, r := range rows {
					if r["run_status"] != status {
						t.Fatalf("row %v: run_status is not %q", r, status)
					}
				}
			}
		})
	}
}
