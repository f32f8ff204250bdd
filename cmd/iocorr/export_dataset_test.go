package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/dataset"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/ducktest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// studyRun is one run of the test's study: a synthetic run of shape
// (ingested as a recorded one is) of model, under budget.
type studyRun struct {
	model           string
	shape           storetest.SynthShape
	budget          int64
	records, tokens int
}

// A study of three runs (two budgets of one model, one of another) added
// to one dataset answers "decode bytes per token by budget and model" in
// one DuckDB query over hive partitions, whose sums are each run's query.
// Adding a run again leaves the dataset as it was.
func TestADatasetOfThreeRunsAnswersBytesPerTokenByBudgetAndModelInOneQuery(t *testing.T) {
	study := []studyRun{
		{"moe-a.gguf", storetest.SmallShape, 64 << 20, 3000, 10},
		{"moe-a.gguf", storetest.SmallShape, 128 << 20, 2000, 8},
		{"moe-b.gguf", storetest.SynthShape{Layers: 6, Experts: 4}, 64 << 20, 2500, 9},
	}
	ds := filepath.Join(t.TempDir(), "study")
	type want struct{ bytes, tokens string }
	wants := map[string]want{} // "model budget" → query's decode figures
	var dirs []string
	for i, r := range study {
		dir := t.TempDir()
		storetest.WriteSynthRun(t, dir, r.records, r.tokens, r.shape)
		meta, err := rundir.ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		meta.Models[0].Path = r.model
		meta.Controls.MemLimit = r.budget
		meta.Start = time.Date(2026, 11, 27, 6, i, 0, 0, time.UTC)
		meta.Complete, meta.Finished = true, true
		if err := rundir.WriteMeta(dir, meta); err != nil {
			t.Fatal(err)
		}
		if _, errOut, err := runCmd(t, "ingest", dir); err != nil {
			t.Fatalf("ingest: %v\n%s", err, errOut)
		}
		rows := jsonRows(t, "query", "-i", dir, "--phase", "decode", "--by", "phase", "--all")
		tokens := jsonRows(t, "query", "-i", dir, "--phase", "decode", "--all")
		if len(rows) != 1 || len(tokens) == 0 {
			t.Fatalf("query of run %d: %v", i, rows)
		}
		wants[fmt.Sprintf("%s %d", r.model, r.budget)] = want{fmt.Sprint(rows[0]["bytes_read"]), fmt.Sprint(len(tokens))}
		if _, errOut, err := runCmd(t, "export", "-i", dir, "dataset", "-o", ds); err != nil || !strings.Contains(errOut, "added to the dataset") {
			t.Fatalf("export dataset: %v\n%s", err, errOut)
		}
		dirs = append(dirs, dir)
	}

	// Again: the run is found by its ID and nothing is rewritten.
	before := modTimes(t, ds)
	if _, errOut, err := runCmd(t, "export", "-i", dirs[0], "dataset", "-o", ds); err != nil || !strings.Contains(errOut, "already in the dataset") {
		t.Fatalf("export dataset again: %v\n%s", err, errOut)
	}
	if after := modTimes(t, ds); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("adding a run again changed the dataset:\n%v\n%v", before, after)
	}

	db := ducktest.Open(t)
	q := fmt.Sprintf(`SELECT r.model_file, r.budget_bytes, sum(t.bytes_read)::UBIGINT, sum(t.n_tokens)::UBIGINT,
			sum(t.bytes_read) / sum(t.n_tokens) AS bytes_per_token
		FROM read_parquet('%[1]s/tokens/*/*.parquet', hive_partitioning = true) t
		JOIN read_parquet('%[1]s/runs/*/*.parquet', hive_partitioning = true) r USING (run)
		WHERE t.phase = 'decode'
		GROUP BY r.model_file, r.budget_bytes ORDER BY 1, 2`, ds)
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var model string
		var budget int64
		var bytes, tokens uint64
		var perToken float64
		if err := rows.Scan(&model, &budget, &bytes, &tokens, &perToken); err != nil {
			t.Fatal(err)
		}
		n++
		w, ok := wants[fmt.Sprintf("%s %d", model, budget)]
		if !ok || fmt.Sprint(bytes) != w.bytes || fmt.Sprint(tokens) != w.tokens {
			t.Errorf("%s under %d: %d bytes read in %d decode tokens; query says %+v", model, budget, bytes, tokens, w)
		}
		t.Logf("%s under %d MiB: %d decode tokens, %d bytes read, %.0f bytes per token", model, budget>>20, tokens, bytes, perToken)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(study) {
		t.Errorf("%d groups, want %d", n, len(study))
	}
	// The runs table: one row a run, typed.
	var runRows int
	var start, na string
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(*), any_value(typeof(start)), any_value(na)
		FROM read_parquet('%s/runs/*/*.parquet', hive_partitioning = true)
		WHERE experts > 0 AND decode_tokens > 0 AND model_hash <> '' AND run_status IS NULL`, ds)).Scan(&runRows, &start, &na); err != nil {
		t.Fatal(err)
	}
	if runRows != len(study) || !strings.HasPrefix(start, "TIMESTAMP") || !strings.HasPrefix(na, "{") {
		t.Errorf("runs: %d rows with experts, tokens, a model hash and no status, start %s, na %s", runRows, start, na)
	}
	// Every table of the dataset reads as one table of the three runs.
	for _, table := range dataset.Tables {
		var runs int
		if err := db.QueryRow(fmt.Sprintf(`SELECT count(DISTINCT run) FROM read_parquet('%s/%s/*/*.parquet', hive_partitioning = true)`, ds, table)).Scan(&runs); err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
		if runs != len(study) {
			t.Errorf("table %s has %d runs, want %d", table, runs, len(study))
		}
	}
}

// modTimes lists every file under dir with its modification time.
func modTimes(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, fmt.Sprintf("%s@%d", p, info.ModTime().UnixNano()))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
