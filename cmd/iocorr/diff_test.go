package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/testkit/rectest"
)

func TestDiffBadUsageIsOneLineError(t *testing.T) {
	a, b := rectest.TinyRun(t), rectest.TinyRun(t)
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
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "diff: ") || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("got %q, want one line starting \"diff: \" containing %q", msg, tc.want)
			}
		})
	}
}

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

// TestDiffOfAnUnfinishedRunSaysWhichRunInEveryOutput: B's recorder did
// not finish; stderr names run B and its directory, CSV starts with a
// comment and every JSON row carries it, prefixed "run B: ".
func TestDiffOfAnUnfinishedRunSaysWhichRunInEveryOutput(t *testing.T) {
	a, b := rectest.TinyRun(t), rectest.TinyRun(t)
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
