package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/dataset"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/ducktest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// studyRun is one run of the test's study: a synthetic run of shape
// (ingested as a recorded one is) over a real GGUF model file of type
// typ, under budget.
type studyRun struct {
	model           string
	shape           storetest.SynthShape
	typ             gguf.Type
	budget          int64
	records, tokens int
}

// A study of three runs (two budgets of one model, one of another) added
// to one dataset answers "decode bytes per token by budget and model" in
// one DuckDB query over hive partitions, whose sums are each run's query;
// its runs table says each run's model as the model file does. Adding a
// run again finds it there.
func TestADatasetOfThreeRunsAnswersBytesPerTokenByBudgetAndModelInOneQuery(t *testing.T) {
	study := []studyRun{
		{"moe-a.gguf", storetest.SmallShape, gguf.TypeQ8_0, 64 << 20, 3000, 10},
		{"moe-a.gguf", storetest.SmallShape, gguf.TypeQ8_0, 128 << 20, 2000, 8},
		{"moe-b.gguf", storetest.SynthShape{Layers: 6, Experts: 4}, gguf.TypeF16, 64 << 20, 2500, 9},
	}
	ds := filepath.Join(t.TempDir(), "study")
	models := t.TempDir()
	type want struct{ bytes, tokens string }
	wants := map[string]want{} // "model budget" → query's decode figures
	var dirs []string
	for i, r := range study {
		dir := t.TempDir()
		storetest.WriteSynthRun(t, dir, r.records, r.tokens, r.shape)
		model := filepath.Join(models, r.model)
		if i == 0 || r.model != study[i-1].model {
			storetest.SynthModel(t, dir, model, r.shape, r.typ)
		} else {
			storetest.UseModel(t, dir, dirs[i-1])
		}
		meta, err := rundir.ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		meta.Host = rundir.Host{Hostname: "edge-1", Kernel: "6.1.0-edge", CPUModel: "cortex-a76"}
		meta.Libraries = []rundir.Library{{Path: "/opt/llama/libllama.so", BuildID: fmt.Sprintf("b%d", 4000+i)}}
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
		wants[fmt.Sprintf("%s %d", model, r.budget)] = want{fmt.Sprint(rows[0]["bytes_read"]), fmt.Sprint(len(tokens))}
		if _, errOut, err := runCmd(t, "export", "-i", dir, "dataset", "-o", ds); err != nil || !strings.Contains(errOut, "added to the dataset") {
			t.Fatalf("export dataset: %v\n%s", err, errOut)
		}
		dirs = append(dirs, dir)
	}

	// Again: the run is found by its ID (that nothing is rewritten is
	// dataset's test).
	if _, errOut, err := runCmd(t, "export", "-i", dirs[0], "dataset", "-o", ds); err != nil || !strings.Contains(errOut, "already in the dataset") {
		t.Fatalf("export dataset again: %v\n%s", err, errOut)
	}

	db := ducktest.Open(t)
	// The README's query, with the sums beside.
	q := fmt.Sprintf(`SELECT r.model_file, r.quant_type, r.budget_bytes, sum(t.bytes_read) / sum(t.n_tokens) AS bytes_per_token,
			sum(t.bytes_read)::BIGINT, sum(t.n_tokens)::BIGINT
		FROM read_parquet('%[1]s/tokens/*/*.parquet', hive_partitioning = true) t
		JOIN read_parquet('%[1]s/runs/*/*.parquet', hive_partitioning = true) r USING (run)
		WHERE t.phase = 'decode' AND r.run_status IS NULL GROUP BY ALL ORDER BY ALL`, ds)
	rows, err := db.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var model, quant string
		var budget, bytes, tokens int64
		var perToken float64
		if err := rows.Scan(&model, &quant, &budget, &perToken, &bytes, &tokens); err != nil {
			t.Fatal(err)
		}
		n++
		w, ok := wants[fmt.Sprintf("%s %d", model, budget)]
		if !ok || fmt.Sprint(bytes) != w.bytes || fmt.Sprint(tokens) != w.tokens || perToken != float64(bytes)/float64(tokens) {
			t.Errorf("%s under %d: %d bytes read in %d decode tokens, %v per token; query says %+v", model, budget, bytes, tokens, perToken, w)
		}
		t.Logf("%s under %d MiB: %d decode tokens, %d bytes read, %.0f bytes per token", filepath.Base(model), budget>>20, tokens, bytes, perToken)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(study) {
		t.Errorf("%d groups, want %d", n, len(study))
	}
	// The runs table: one row a run, typed, what each run's model file
	// and meta.json say.
	for i, r := range study {
		var arch, quant, build, host, kernel, start, na string
		var experts int
		var tps sql.NullFloat64
		err := db.QueryRow(fmt.Sprintf(`SELECT architecture, quant_type, experts, llama_build, host, kernel, typeof(start), na, tokens_per_s
			FROM read_parquet('%s/runs/*/*.parquet', hive_partitioning = true) WHERE run_dir = '%s' AND run_status IS NULL`, ds, dirs[i])).
			Scan(&arch, &quant, &experts, &build, &host, &kernel, &start, &na, &tps)
		if err != nil {
			t.Fatalf("runs row of run %d: %v", i, err)
		}
		wantBuild := fmt.Sprintf("libllama.so:b%d", 4000+i)
		if arch != "llama" || quant != r.typ.String() || experts != r.shape.Experts || build != wantBuild || host != "edge-1" || kernel != "6.1.0-edge" ||
			!strings.HasPrefix(start, "TIMESTAMP") {
			t.Errorf("run %d: %s %s, %d experts, build %s, host %s, kernel %s, start %s; want llama %s, %d, %s, edge-1, 6.1.0-edge, a timestamp",
				i, arch, quant, experts, build, host, kernel, start, r.typ, r.shape.Experts, wantBuild)
		}
		// The synthetic runs time no decode call: no speed, and why.
		if tps.Valid || !strings.Contains(na, `"tokens_per_s":`) {
			t.Errorf("run %d: tokens_per_s %v, na %s: want null with its reason", i, tps, na)
		}
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
