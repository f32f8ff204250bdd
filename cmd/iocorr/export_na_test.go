package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/output"
)

// checkUnmeasured checks what query or an export (args, without
// --format) does with the counters na a run did not measure, for why: by
// default the CSV leaves their columns out and stderr says so in one line
// naming why; with --all-columns they are there, empty in CSV and null
// in JSON, with no reason in any row; written with -o, the sidecar
// NAME.na.json holds why. measured is a counter the run has, in every
// row.
func checkUnmeasured(t *testing.T, args, na []string, measured, why string) {
	t.Helper()
	readCSV := func(extra ...string) ([][]string, string) {
		t.Helper()
		out, errOut, err := runCmd(t, append(append(slices.Clone(args), "--format", "csv"), extra...)...)
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, errOut)
		}
		// Go's reader with no Comment: the first line is the header.
		recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
		if err != nil || len(recs) < 2 {
			t.Fatalf("%v: bad CSV (%v):\n%s", args, err, out)
		}
		return recs, errOut
	}
	recs, errOut := readCSV()
	for _, col := range na {
		if slices.Contains(recs[0], col) {
			t.Errorf("%v: the default CSV has the unmeasured column %s", args, col)
		}
	}
	if !slices.Contains(recs[0], measured) {
		t.Errorf("%v: the CSV left out %s, which the run measured: %v", args, measured, recs[0])
	}
	var notes []string
	for _, l := range strings.Split(errOut, "\n") {
		if strings.Contains(l, why) {
			notes = append(notes, l)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "left out") || !strings.Contains(notes[0], na[0]) {
		t.Errorf("%v: stderr says why %d times, want once naming %s as left out:\n%s", args, len(notes), na[0], errOut)
	}

	recs, _ = readCSV("--all-columns")
	for _, rec := range recs[1:] {
		for i, col := range recs[0] {
			switch {
			case slices.Contains(na, col) && rec[i] != "":
				t.Errorf("%v --all-columns: %s = %q, want NA (empty)", args, col, rec[i])
			case col == measured && rec[i] == "":
				t.Errorf("%v --all-columns: %s NA, but the run measured it", args, col)
			}
		}
	}
	for _, col := range na {
		if !slices.Contains(recs[0], col) {
			t.Errorf("%v --all-columns: no column %s", args, col)
		}
	}
	js, _, err := runCmd(t, append(slices.Clone(args), "--format", "jsonl", "--all-columns")...)
	if err != nil {
		t.Fatal(err)
	}
	var row map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(js, "\n", 2)[0]), &row); err != nil {
		t.Fatal(err)
	}
	for _, col := range na {
		if v, ok := row[col]; !ok || v != nil {
			t.Errorf("%v: JSON row %s = %v (present %v), want null", args, col, v, ok)
		}
	}
	for col := range row {
		if strings.HasSuffix(col, "_na_reason") {
			t.Errorf("%v: a JSON row carries a reason, %s", args, col)
		}
	}

	if args[0] != "export" {
		return
	}
	out := filepath.Join(t.TempDir(), "x.csv")
	if _, errOut, err := runCmd(t, append(slices.Clone(args), "-o", out)...); err != nil {
		t.Fatalf("%v -o: %v\n%s", args, err, errOut)
	}
	b, err := os.ReadFile(filepath.Join(filepath.Dir(out), "x.na.json"))
	if err != nil {
		t.Fatalf("no sidecar: %v", err)
	}
	var side output.Sidecar
	if err := json.Unmarshal(b, &side); err != nil {
		t.Fatal(err)
	}
	for _, col := range na {
		if !strings.Contains(side.NA[col], why) || !slices.Contains(side.LeftOut, col) {
			t.Errorf("%v: the sidecar says %s is NA for %q, left out %v; want %q, left out", args, col, side.NA[col], side.LeftOut, why)
		}
	}
}
