package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/testkit/ducktest"
	"github.com/iocorr/iocorr/testkit/runtest"
)

// checkStatsParquetEqualsJSON exports the stats tables of the run in dir
// as Parquet and reads every cell back through DuckDB: each equals what
// iocorr stats --format json prints (a null where JSON has null, with the
// same NA reason). It returns how many cells it compared.
func checkStatsParquetEqualsJSON(t *testing.T, dir string) int {
	t.Helper()
	js, _, err := runCmd(t, "stats", "-i", dir, "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	var want struct {
		Tables map[string][]map[string]any `json:"tables"`
		Order  []string                    `json:"table_order"`
	}
	dec := json.NewDecoder(strings.NewReader(js))
	dec.UseNumber()
	if err := dec.Decode(&want); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "stats")
	if _, errOut, err := runCmd(t, "export", "-i", dir, "stats", "--format", "parquet", "-o", out); err != nil {
		t.Fatalf("export stats: %v\n%s", err, errOut)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.parquet"))
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".parquet"))
	}
	slices.Sort(names)
	wantNames := slices.Sorted(slices.Values(want.Order))
	if !slices.Equal(names, wantNames) {
		t.Fatalf("Parquet files %v, stats tables %v", names, wantNames)
	}
	db := ducktest.Open(t)
	cells := 0
	for _, name := range names {
		// Why a column is NA, where its rows do not say: the sidecar.
		b, err := os.ReadFile(filepath.Join(out, name+".na.json"))
		if err != nil {
			t.Fatal(err)
		}
		var side output.Sidecar
		if err := json.Unmarshal(b, &side); err != nil {
			t.Fatal(err)
		}
		rows, err := db.Query(fmt.Sprintf(`SELECT * FROM '%s'`, filepath.Join(out, name+".parquet")))
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		var i int
		for ; rows.Next(); i++ {
			vals := ducktest.Row(t, rows, len(cols))
			if i >= len(want.Tables[name]) {
				t.Errorf("%s: more rows in Parquet than the %d of stats", name, len(want.Tables[name]))
				break
			}
			w := want.Tables[name][i]
			for k, c := range cols {
				wv, ok := w[c]
				if !ok && strings.HasSuffix(c, "_na_reason") {
					wv = nil // JSON names a reason only where the figure is NA
				} else if !ok {
					t.Errorf("%s row %d: column %s not in stats' JSON", name, i, c)
					continue
				}
				if !sameCell(vals[k], wv) {
					t.Errorf("%s row %d %s: Parquet %v (%T), stats %v", name, i, c, vals[k], vals[k], wv)
				}
				cells++
				why, isNA := w[c+"_na_reason"]
				if !isNA || slices.Contains(cols, c+"_na_reason") {
					continue
				}
				if side.NA[c] != why && side.SomeRowsNA[c] != why {
					t.Errorf("%s row %d %s: NA for %q, the sidecar says %q (every row) or %q (some)", name, i, c, why, side.NA[c], side.SomeRowsNA[c])
				}
			}
		}
		rows.Close()
		if i != len(want.Tables[name]) {
			t.Errorf("%s: %d rows in Parquet, %d in stats", name, i, len(want.Tables[name]))
		}
	}
	return cells
}

// sameCell compares a DuckDB value with a JSON one decoded with UseNumber.
func sameCell(got, want any) bool {
	switch w := want.(type) {
	case nil:
		return got == nil
	case string:
		return got == w
	case json.Number:
		if f, ok := got.(float64); ok {
			wf, err := w.Float64()
			return err == nil && wf == f
		}
		return fmt.Sprint(got) == w.String()
	}
	return false
}

func TestStatsParquetTablesReadInDuckDBAsStatsPrintsThem(t *testing.T) {
	if n := checkStatsParquetEqualsJSON(t, runtest.TinyRun(t)); n < 100 {
		t.Errorf("compared %d cells: the tiny run's stats should give more", n)
	}
}

func TestExportStatsAsTextIsOneNamedTable(t *testing.T) {
	dir := runtest.TinyRun(t)
	if _, _, err := runCmd(t, "export", "-i", dir, "stats"); err == nil || !strings.Contains(err.Error(), "--table") {
		t.Errorf("export stats without --table: %v, want a usage error naming --table", err)
	}
	if _, _, err := runCmd(t, "export", "-i", dir, "stats", "--table", "nonesuch"); err == nil || !strings.Contains(err.Error(), "nonesuch") {
		t.Errorf("export stats --table nonesuch: %v", err)
	}
	out, _, err := runCmd(t, "export", "-i", dir, "stats", "--table", "layers")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "layer,") {
		t.Errorf("export stats --table layers: CSV starts %q", strings.SplitN(out, "\n", 2)[0])
	}
	one := filepath.Join(t.TempDir(), "one")
	if _, _, err := runCmd(t, "export", "-i", dir, "stats", "--table", "layers", "--format", "parquet", "-o", one); err != nil {
		t.Fatal(err)
	}
	names := dirNames(one)
	if !slices.Equal(names, []string{"layers.na.json", "layers.parquet"}) {
		t.Errorf("--table layers --format parquet wrote %v, want the table and its sidecar", names)
	}
}
