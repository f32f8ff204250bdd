package dataset_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/dataset"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/sweep"
	"github.com/iocorr/iocorr/testkit/ducktest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// testRun is a synthetic run (storetest.WriteSynthRun, ingested as a
// recorded one is) over a real GGUF model file.
type testRun struct {
	model  string // the model file's name, in the test's directory
	shape  storetest.SynthShape
	typ    gguf.Type
	budget int64 // 0: no memory limit
	dir    string
	meta   *rundir.Meta
}

// makeRuns writes and ingests runs; runs of one model name share its file.
func makeRuns(t *testing.T, runs []*testRun) {
	t.Helper()
	models := t.TempDir()
	made := map[string]string{} // model → the first run's dir, whose meta has it
	for i, r := range runs {
		r.dir = t.TempDir()
		storetest.WriteSynthRun(t, r.dir, 3000, 10+i, r.shape)
		path := filepath.Join(models, r.model)
		if first, ok := made[r.model]; ok {
			storetest.UseModel(t, r.dir, first)
		} else {
			storetest.SynthModel(t, r.dir, path, r.shape, r.typ)
			made[r.model] = r.dir
		}
		meta, err := rundir.ReadMeta(r.dir)
		if err != nil {
			t.Fatal(err)
		}
		meta.Start = time.Date(2026, 11, 27, 6, i, 0, 0, time.UTC)
		meta.Complete, meta.Finished = true, true
		meta.Controls.MemLimit = r.budget
		meta.Tier, meta.ProbeSet, meta.Version = rundir.TierDefault, "graph", "v-test"
		meta.Command = []string{"llama-cli", "-m", path}
		meta.Host = rundir.Host{Hostname: "box", Kernel: "6.1.0-test", CPUModel: "cpu"}
		meta.Libraries = []rundir.Library{{Path: "/lib/libllama.so", BuildID: "ab12"}, {Path: "/lib/libggml-base.so", BuildID: "cd34"}}
		if err := rundir.WriteMeta(r.dir, meta); err != nil {
			t.Fatal(err)
		}
		r.meta = meta
		if _, err := pipeline.Ingest(t.Context(), r.dir, pipeline.Options{}); err != nil {
			t.Fatal(err)
		}
	}
}

// twoModels is a dataset of a run of each of two models (one under a
// budget, one without), and DuckDB to read it.
func twoModels(t *testing.T) ([]*testRun, string, *sql.DB) {
	t.Helper()
	runs := []*testRun{
		{model: "a.gguf", shape: storetest.SmallShape, typ: gguf.TypeQ8_0, budget: 64 << 20},
		{model: "b.gguf", shape: storetest.SynthShape{Layers: 6, Experts: 4}, typ: gguf.TypeF16},
	}
	makeRuns(t, runs)
	ds := filepath.Join(t.TempDir(), "study")
	for _, r := range runs {
		add(t, ds, r.dir)
	}
	return runs, ds, ducktest.Open(t)
}

func add(t *testing.T, ds, run string) (string, bool) {
	t.Helper()
	id, added, err := dataset.Add(context.Background(), ds, run)
	if err != nil {
		t.Fatal(err)
	}
	return id, added
}

// Adding a run again finds it by its ID and rewrites nothing; a run
// whose Add was cut short (no runs row, written last) is written again.
func TestAddIsIdempotentAndRedoesARunCutShort(t *testing.T) {
	runs := []*testRun{{model: "a.gguf", shape: storetest.SmallShape, typ: gguf.TypeQ8_0}}
	makeRuns(t, runs)
	ds := filepath.Join(t.TempDir(), "study")
	id, added := add(t, ds, runs[0].dir)
	if !added || !regexp.MustCompile(`^20261127T060000Z-[0-9a-f]{16}$`).MatchString(id) {
		t.Fatalf("first add: id %q, added %v", id, added)
	}
	before := modTimes(t, ds)
	for _, tc := range []struct {
		name      string
		cut       func()
		wantAdded bool
	}{
		{"again", func() {}, false},
		{"its runs row lost", func() { os.RemoveAll(dataset.Partition(ds, dataset.Runs, id)) }, true},
		{"once more", func() {}, false},
	} {
		tc.cut()
		got, added := add(t, ds, runs[0].dir)
		if got != id || added != tc.wantAdded {
			t.Errorf("%s: id %s, added %v; want %s, %v", tc.name, got, added, id, tc.wantAdded)
		}
		if !tc.wantAdded && tc.name == "again" && fmt.Sprint(modTimes(t, ds)) != fmt.Sprint(before) {
			t.Errorf("%s: the dataset changed", tc.name)
		}
	}
	// Every table has the run's partition, one file each.
	for _, table := range dataset.Tables {
		files, _ := filepath.Glob(filepath.Join(dataset.Partition(ds, table, id), "*"))
		if len(files) != 1 || filepath.Base(files[0]) != dataset.FileName {
			t.Errorf("table %s: %v", table, files)
		}
	}
}

// The runs row of each run, column by column, read by DuckDB: what the
// run's meta.json, its model file and its other tables say, and null
// (typed, its reason in na) for what the run did not measure.
func TestRunsRowSaysWhatRanWhereAndHowFastWithNAAsNull(t *testing.T) {
	runs, ds, db := twoModels(t)
	for i, r := range runs {
		st, err := os.Stat(r.meta.Models[0].Path)
		if err != nil {
			t.Fatal(err)
		}
		// decode tokens and bytes read per token from the tokens table,
		// written by another path (output.Tokens) than the runs row's
		// (sweep.Summarize).
		var decode int64
		var perToken float64
		var timed int
		q := fmt.Sprintf(`SELECT count(*), sum(bytes_read) / count(*), count(duration_ns) FROM read_parquet('%s/tokens/*/*.parquet', hive_partitioning = true)
			WHERE phase = 'decode' AND run = (SELECT run FROM read_parquet('%[1]s/runs/*/*.parquet', hive_partitioning = true) WHERE run_dir = '%s')`, ds, r.dir)
		if err := db.QueryRow(q).Scan(&decode, &perToken, &timed); err != nil || decode == 0 {
			t.Fatalf("%s: %d decode tokens, %v", q, decode, err)
		}
		budget := any(r.budget)
		if r.budget == 0 {
			budget = nil
		}
		want := map[string]any{
			"model_file": r.meta.Models[0].Path, "model_bytes": st.Size(), "architecture": "llama", "quant_type": r.typ.String(),
			"experts": int32(r.shape.Experts), "budget_bytes": budget, "tier": "default", "probe_set": "graph", "kernel": "6.1.0-test",
			"llama_build": "libggml-base.so:cd34,libllama.so:ab12", "host": "box", "cpu_model": "cpu",
			"start": time.Date(2026, 11, 27, 6, i, 0, 0, time.UTC), "iocorr_version": "v-test", "command": strings.Join(r.meta.Command, " "),
			"run_status": nil, "decode_tokens": uint64(decode), "bytes_read_per_token": perToken, "run_dir": r.dir,
			// The synthetic runs time no decode call (no decode end
			// record): no speed, and the tokens have no duration.
			"tokens_per_s": nil,
		}
		if timed != 0 {
			t.Fatalf("run %d: %d decode tokens timed, want none", i, timed)
		}
		got := queryRow(t, db, fmt.Sprintf(`SELECT * EXCLUDE (run) FROM read_parquet('%s/runs/*/*.parquet', hive_partitioning = true) WHERE run_dir = '%s'`, ds, r.dir))
		for _, c := range columnNames(t, db, fmt.Sprintf(`%s/runs/*/*.parquet`, ds)) {
			if c == "run" || c == "na" || c == "model_hash" {
				continue
			}
			w, ok := want[c]
			if !ok {
				t.Errorf("runs column %s has no expected value in the test", c)
				continue
			}
			if g := got[c]; fmt.Sprint(g) != fmt.Sprint(w) {
				t.Errorf("run %d: %s = %v (%T), want %v (%T)", i, c, g, g, w, w)
			}
		}
		var na map[string]string
		if err := json.Unmarshal([]byte(got["na"].(string)), &na); err != nil {
			t.Fatalf("run %d: na %v: %v", i, got["na"], err)
		}
		if na["tokens_per_s"] == "" {
			t.Errorf("run %d: tokens_per_s null without a reason in na %v", i, na)
		}
		if h, _ := got["model_hash"].(string); !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(h) {
			t.Errorf("run %d: model_hash %q", i, h)
		}
	}
	var hashes int
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(DISTINCT model_hash) FROM read_parquet('%s/runs/*/*.parquet')`, ds)).Scan(&hashes); err != nil || hashes != 2 {
		t.Errorf("%d model hashes for two models (%v)", hashes, err)
	}
}

// A run that failed is a runs row with its status and null figures; one
// that never started (no meta.json) too, with what its sweep knew. A run
// whose model file is gone has a null architecture, and says why.
func TestFailedRunsAndAMissingModelAreRunsRowsWithNulls(t *testing.T) {
	runs := []*testRun{{model: "a.gguf", shape: storetest.SmallShape, typ: gguf.TypeQ8_0, budget: 96 << 20},
		{model: "gone.gguf", shape: storetest.SmallShape, typ: gguf.TypeQ8_0}}
	makeRuns(t, runs)
	if err := os.Remove(runs[1].meta.Models[0].Path); err != nil {
		t.Fatal(err)
	}
	ds := filepath.Join(t.TempDir(), "study")
	never := filepath.Join(t.TempDir(), "2MiB")
	sw := dataset.Sweep{Dir: ds}
	for _, a := range []struct {
		run string
		row sweep.Row
	}{
		{runs[0].dir, sweep.Row{Status: "killed by SIGKILL (OOM: 1 OOM kills in its memory cgroup)", MemLimit: 96 << 20}},
		{never, sweep.Row{Status: "not run: no such command", MemLimit: 2 << 20}},
		{runs[1].dir, sweep.Row{Status: sweep.StatusOK}},
	} {
		if err := sw.AddRun(context.Background(), a.run, &a.row, []string{"llama-cli"}); err != nil {
			t.Fatal(err)
		}
	}
	db := ducktest.Open(t)
	for _, tc := range []struct {
		run     string
		notNull []string
		null    []string
		status  any
	}{
		{runs[0].dir, []string{"model_file", "architecture", "quant_type", "budget_bytes", "host", "start"},
			[]string{"decode_tokens", "tokens_per_s", "bytes_read_per_token"}, "killed by SIGKILL (OOM: 1 OOM kills in its memory cgroup)"},
		{never, []string{"budget_bytes", "start", "command"},
			[]string{"model_file", "model_hash", "architecture", "quant_type", "experts", "host", "kernel", "decode_tokens", "tokens_per_s"}, "not run: no such command"},
		{runs[1].dir, []string{"model_file", "quant_type", "decode_tokens"}, []string{"architecture", "budget_bytes", "run_status"}, nil},
	} {
		got := queryRow(t, db, fmt.Sprintf(`SELECT * FROM read_parquet('%s/runs/*/*.parquet', hive_partitioning = true) WHERE run_dir = '%s'`, ds, tc.run))
		var na map[string]string
		if err := json.Unmarshal([]byte(got["na"].(string)), &na); err != nil {
			t.Fatal(err)
		}
		for _, c := range tc.null {
			if got[c] != nil || (c != "run_status" && c != "budget_bytes" && na[c] == "") {
				t.Errorf("%s: %s = %v, NA %q: want null with a reason", tc.run, c, got[c], na[c])
			}
		}
		for _, c := range tc.notNull {
			if got[c] == nil {
				t.Errorf("%s: %s null (NA %q)", tc.run, c, na[c])
			}
		}
		if fmt.Sprint(got["run_status"]) != fmt.Sprint(tc.status) {
			t.Errorf("%s: run_status %v, want %v", tc.run, got["run_status"], tc.status)
		}
	}
	// Only the run that ran to its end has rows in the other tables.
	var tokenRuns int
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(DISTINCT run) FROM read_parquet('%s/tokens/*/*.parquet', hive_partitioning = true)`, ds)).Scan(&tokenRuns); err != nil || tokenRuns != 1 {
		t.Errorf("tokens of %d runs (%v), want 1", tokenRuns, err)
	}
}

// Each table's files of runs of different models read as one table with
// DuckDB's defaults (no union_by_name): one schema, the run partition
// its last column, integers signed. The long stats tables have the
// figures of stats's.
func TestEveryTableHasOneSchemaAcrossRuns(t *testing.T) {
	runs, ds, db := twoModels(t)
	// The long tables' columns are stats's, each nullable, and na_reason.
	long := map[string]string{
		dataset.ExpertActivations: "phase VARCHAR, layer BIGINT, expert BIGINT, activations BIGINT, na_reason VARCHAR, run VARCHAR",
		dataset.CacheSimLayers:    "layer BIGINT, policy VARCHAR, k_experts BIGINT, hit_rate_ratio DOUBLE, hit_rate_after_warmup_ratio DOUBLE, bytes_read_per_token_bytes DOUBLE, na_reason VARCHAR, run VARCHAR",
		dataset.Residency:         "token BIGINT, tensor VARCHAR, resident_pages BIGINT, pages BIGINT, resident_share_ratio DOUBLE, na_reason VARCHAR, run VARCHAR",
		dataset.IOShapeTokens: "token BIGINT, phase VARCHAR, wall_ns BIGINT, busy_share DOUBLE, stall_share DOUBLE, wait_share DOUBLE, preempted_share DOUBLE, requests BIGINT, requests_without_completion BIGINT, " +
			"requests_in_flight_mean DOUBLE, requests_in_flight_peak BIGINT, bytes_read_bytes BIGINT, read_bandwidth_mb_per_s DOUBLE, device_bandwidth_mb_per_s DOUBLE, " +
			"bandwidth_share DOUBLE, depth_gain DOUBLE, faults_in_flight_mean DOUBLE, faults_in_flight_peak BIGINT, request_size_mean_bytes DOUBLE, verdict VARCHAR, na_reason VARCHAR, run VARCHAR",
	}
	for _, table := range dataset.Tables {
		var schemas []string
		files, _ := filepath.Glob(filepath.Join(ds, table, "*", dataset.FileName))
		for _, f := range files {
			schemas = append(schemas, schema(t, db, f))
		}
		if len(schemas) != len(runs) || slices.Compact(slices.Clone(schemas))[0] != schemas[len(schemas)-1] {
			t.Errorf("table %s: schemas of its files differ:\n%s", table, strings.Join(schemas, "\n"))
			continue
		}
		all := schema(t, db, filepath.Join(ds, table, "*", "*.parquet"))
		if !strings.HasSuffix(all, ", run VARCHAR") {
			t.Errorf("table %s: %s: want the run partition last", table, all)
		}
		// Signed integers only: Spark, Trino and Hive have no unsigned.
		if u := regexp.MustCompile(`\w+ U(TINYINT|SMALLINT|INTEGER|BIGINT)`).FindString(all); u != "" {
			t.Errorf("table %s: %s unsigned", table, u)
		}
		if want, ok := long[table]; ok && all != want {
			t.Errorf("table %s:\n got %s\nwant %s", table, all, want)
		}
	}
	// A null figure says why in na_reason (the synthetic runs took no
	// residency snapshot).
	var nulls, unexplained int
	if err := db.QueryRow(fmt.Sprintf(`SELECT count(*), count(*) FILTER (na_reason IS NULL)
		FROM read_parquet('%s/residency/*/*.parquet', hive_partitioning = true) WHERE resident_pages IS NULL`, ds)).Scan(&nulls, &unexplained); err != nil || nulls == 0 || unexplained != 0 {
		t.Errorf("residency: %d null resident_pages, %d without a reason (%v); want some, none", nulls, unexplained, err)
	}
	// The long tables carry stats's rows, figure for figure.
	for i, r := range runs {
		run := storetest.OpenRun(t, r.dir)
		rep, err := stats.Compute(run, stats.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, table := range []string{dataset.ExpertActivations, dataset.CacheSimLayers, dataset.Residency, dataset.IOShapeTokens} {
			var want []string
			if err := rep.Table(table).Each(func(row []stats.Value) error {
				var cells []string
				for _, v := range row {
					cells = append(cells, statsCell(v))
				}
				want = append(want, strings.Join(cells, "|"))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got := rowsOf(t, db, fmt.Sprintf(`SELECT * EXCLUDE (run, na_reason) FROM read_parquet('%s/%s/*/*.parquet', hive_partitioning = true)
				WHERE run = (SELECT run FROM read_parquet('%[1]s/runs/*/*.parquet', hive_partitioning = true) WHERE run_dir = '%[3]s')`, ds, table, r.dir))
			if d := firstDiff(got, want); d != "" {
				t.Errorf("run %d: table %s: %d rows, stats has %d: %s", i, table, len(got), len(want), d)
			}
			if table == dataset.ExpertActivations && len(want) != 2*r.shape.Layers*r.shape.Experts {
				t.Errorf("run %d: %d activation rows, want phase × layer × expert = %d", i, len(want), 2*r.shape.Layers*r.shape.Experts)
			}
		}
		rep.Close()
	}
}

// firstDiff says where got and want first differ, or "".
func firstDiff(got, want []string) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("row %d: %s, want %s", i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		return "the rows differ in number"
	}
	return ""
}

func statsCell(v stats.Value) string {
	switch {
	case v.NA != "":
		return "<nil>"
	case v.S != "":
		return v.S
	}
	if v.F != 0 {
		return fmt.Sprint(v.F)
	}
	return fmt.Sprint(v.I)
}

// schema is DuckDB's DESCRIBE of the Parquet files glob, "name TYPE, …".
func schema(t *testing.T, db *sql.DB, glob string) string {
	t.Helper()
	return strings.Join(rowsOf(t, db, fmt.Sprintf(`SELECT column_name || ' ' || column_type FROM (DESCRIBE SELECT * FROM read_parquet('%s', hive_partitioning = true))`, glob)), ", ")
}

func columnNames(t *testing.T, db *sql.DB, glob string) []string {
	t.Helper()
	return rowsOf(t, db, fmt.Sprintf(`SELECT column_name FROM (DESCRIBE SELECT * FROM read_parquet('%s', hive_partitioning = true))`, glob))
}

// rowsOf runs q and gives each row as its cells joined by |, NULL as <nil>.
func rowsOf(t *testing.T, db *sql.DB, q string) []string {
	t.Helper()
	_, rows := ducktest.All(t, db, q)
	var out []string
	for _, vals := range rows {
		cells := make([]string, len(vals))
		for i, v := range vals {
			cells[i] = fmt.Sprint(v)
		}
		out = append(out, strings.Join(cells, "|"))
	}
	return out
}

// queryRow runs q, which has one row, and gives its cells by column.
func queryRow(t *testing.T, db *sql.DB, q string) map[string]any {
	t.Helper()
	cols, rows := ducktest.All(t, db, q)
	if len(rows) != 1 {
		t.Fatalf("%s: %d rows, want one", q, len(rows))
	}
	vals := rows[0]
	out := map[string]any{}
	for i, c := range cols {
		out[c] = vals[i]
	}
	return out
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
