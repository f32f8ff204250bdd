package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/sweep"
	"github.com/iocorr/iocorr/testkit/ducktest"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/runtest"
)

// pyReadAll reads every file of a list (path and format, a pair per
// line on stdin) as a study's first reader would, with Python's own
// modules and their defaults: csv.DictReader, json.load, json.loads per
// line. It prints {path: {"header", "n",
// "rows": [[index, row]...]}} for the rows sampled (see sampled): one
// Python for every export, not one each.
const pyReadAll = `
import csv, json, sys
def sampled(n):
    if n <= sampleHead:
        return range(n)
    idx = list(range(sampleHead))
    for q in range(1, 5):
        k = max(sampleHead, n * q // 4 - sampleWindow)
        idx += range(k, min(n, k + sampleWindow))
    return sorted(set(idx))
out = {}
for line in sys.stdin:
    path, fmt = line.rstrip("\n").rsplit(" ", 1)
    with open(path, newline="") as f:
        if fmt == "csv":
            r = csv.DictReader(f)
            rows = list(r)
            header = r.fieldnames or []
        elif fmt == "json":
            rows = json.load(f)
            header = list(rows[0]) if rows else []
        else:
            rows = [json.loads(l) for l in f if l.strip()]
            header = list(rows[0]) if rows else []
    out[path] = {"header": header, "n": len(rows), "rows": [[i, rows[i]] for i in sampled(len(rows))]}
json.dump(out, sys.stdout)
`

// The rows of an output compared cell by cell: every row of a short one;
// of a long one (a real run's events) the first sampleHead and four
// windows of sampleWindow spread over the rest, ending with the last
// rows, where a reader that typed a column from its first rows goes
// wrong. Every row is read all the same.
const sampleHead, sampleWindow = 2000, 250

// sampled are the indexes of the rows compared of an output of n rows,
// as pyReadAll's sampled.
func sampled(n int) []int {
	var idx []int
	for i := range min(n, sampleHead) {
		idx = append(idx, i)
	}
	if n <= sampleHead {
		return idx
	}
	for q := 1; q <= 4; q++ {
		k := max(sampleHead, n*q/4-sampleWindow)
		for i := k; i < min(n, k+sampleWindow); i++ {
			if i > idx[len(idx)-1] {
				idx = append(idx, i)
			}
		}
	}
	return idx
}

// readerCase is one output of iocorr a study reads: a command (without
// --format and -o) and the formats it is read in.
type readerCase struct {
	name    string
	args    []string
	formats []string
	// file: the command writes -o FILE (an export); else its stdout is the file.
	file bool
	// table: a stats table, which Parquet writes into the directory -o.
	table string
}

// withFormat is args with --format format after the subcommand's name
// (inspect takes no flag after its model).
func withFormat(args []string, format string) []string {
	return append([]string{args[0], "--format", format}, args[1:]...)
}

// canon is a cell as every reader must agree on it: null as "<null>",
// numbers by value (an integer in decimal, a float in its shortest
// form), text as it is; kind is 'n' for null, 'i' for an integer, 'f'
// for a float, 's' for text.
func canon(v any) (s string, kind byte) {
	switch v := v.(type) {
	case nil:
		return "<null>", 'n'
	case json.Number:
		if i, err := strconv.ParseInt(v.String(), 10, 64); err == nil && !strings.ContainsAny(v.String(), ".eE") {
			return strconv.FormatInt(i, 10), 'i'
		}
		f, _ := v.Float64()
		return strconv.FormatFloat(f, 'g', -1, 64), 'f'
	case string:
		return v, 's'
	case int8, int16, int32, int64, uint8, uint16, uint32, uint64, int, uint:
		return fmt.Sprint(v), 'i'
	case *big.Int:
		return v.String(), 'i'
	case float32:
		return strconv.FormatFloat(float64(v), 'g', -1, 64), 'f'
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), 'f'
	case time.Time:
		return strconv.FormatInt(v.UnixMicro(), 10), 'i'
	}
	return fmt.Sprintf("%v (%T)", v, v), '?'
}

// Every output of iocorr a study reads — each export kind in each format
// (every stats table, the sweep's summary), query by every key, diff,
// predict and inspect — loads in Python's csv and json and in DuckDB's
// read_csv, read_json and read_parquet with their defaults: the header is
// the command's, NA is an empty CSV cell and a JSON or Parquet null
// (never ""), numbers keep their type (an integer column is an integer
// in DuckDB, a float column a double), and every cell equals the
// command's own JSON lines, cell by cell. The run is the synthetic tiny
// run (runtest.TinyRun, no tracer, every figure known by construction)
// as the default tier records it.
func TestEveryOutputLoadsInEveryReaderCellByCell(t *testing.T) {
	if n := checkEveryOutput(t, defaultTierRun(t), runtest.TinyRun(t), nil); n < 10_000 {
		t.Errorf("compared %d cells: the tiny run's outputs should give more", n)
	}
}

// checkEveryOutput checks every output of the run in dir (diff against
// the run in other), or those only keeps (nil: all), and returns how many
// cells it compared.
func checkEveryOutput(t *testing.T, dir, other string, only []string) int {
	t.Helper()
	full := other
	out := t.TempDir()
	sweepDir := filepath.Join(out, "sweep")
	if err := os.Mkdir(sweepDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f := func(v float64) *float64 { return &v }
	if err := sweep.WriteSummary(sweepDir, &sweep.Summary{Rows: []sweep.Row{
		{Budget: "2MiB", MemLimit: 2 << 20, Status: "killed", ExitCode: 137, RunDir: "2MiB",
			NA: map[string]string{"tokens_per_s": "no decode token was recorded", "untraced_tokens_per_s": "no decode token was recorded",
				"reported_tokens_per_s": "no decode token was recorded", "bytes_read_per_token": "no decode token was recorded",
				"major_faults_per_token": "no decode token was recorded", "stall_share": "no decode token was recorded", "expert_hit_rate": "the model has no experts"}},
		{Budget: "128MiB", MemLimit: 128 << 20, Status: "ok", RunDir: "128MiB", Decode: 3, DecodeNS: 9e8, ReadBytes: 3 << 20, Major: 44, StallNS: 1e9,
			TokensPerS: f(3), UntracedTokensPerS: f(2.5), ReportedTokensPerS: f(3.25), BytesPerToken: f(1 << 20), MajorPerToken: f(14), StallShare: f(0),
			ExpertHitRate: f(0.5)},
	}}); err != nil {
		t.Fatal(err)
	}
	all := []string{"csv", "json", "jsonl", "parquet"}
	text := []string{"csv", "json", "jsonl"}
	cases := []readerCase{
		{name: "faults-per-token", args: []string{"export", "-i", dir, "faults-per-token"}, formats: all, file: true},
		{name: "faults-per-token-all-columns", args: []string{"export", "-i", dir, "faults-per-token", "--all-columns"}, formats: all, file: true},
		{name: "faults-per-token-tensor", args: []string{"export", "-i", dir, "faults-per-token-tensor"}, formats: all, file: true},
		{name: "events", args: []string{"export", "-i", dir, "events"}, formats: all, file: true},
		{name: "sweep", args: []string{"export", "-i", sweepDir, "sweep"}, formats: all, file: true},
		// inspect's JSON is one document (summary, tensors), not a table.
		{name: "inspect", args: []string{"inspect", synthModel(t, smallMoE)}, formats: []string{"csv", "jsonl"}},
		{name: "predict", args: []string{"predict", "-i", full, "--mem-limit", "96MiB,128MiB"}, formats: text},
		{name: "query-expert", args: []string{"query", "-i", dir, "--by", "expert"}, formats: text},
		{name: "query-token-all", args: []string{"query", "-i", dir, "--all"}, formats: text},
	}
	for _, by := range []string{"tensor", "layer", "expert", "op", "phase", "request", "device"} {
		cases = append(cases, readerCase{name: "query-" + by + "-all", args: []string{"query", "-i", dir, "--by", by, "--all"}, formats: text})
	}
	for _, by := range []string{"token", "layer", "request"} {
		cases = append(cases, readerCase{name: "diff-" + by, args: []string{"diff", "--by", by, full, dir}, formats: text})
	}
	var order struct {
		Tables []string `json:"table_order"`
	}
	js, _, err := runCmd(t, "stats", "-i", dir, "--format", "json")
	if err != nil || json.Unmarshal([]byte(js), &order) != nil || len(order.Tables) < 13 {
		t.Fatalf("stats: %v, tables %v", err, order.Tables)
	}
	for _, name := range order.Tables {
		cases = append(cases, readerCase{name: "stats-" + name, args: []string{"export", "-i", dir, "stats", "--table", name}, formats: all, file: true, table: name})
	}

	if only != nil {
		cases = slices.DeleteFunc(cases, func(c readerCase) bool { return !slices.Contains(only, c.name) })
	}
	// Write every output, and the reference: the command's JSON lines.
	type written struct {
		c      *readerCase
		format string
		path   string
	}
	var files []written
	want := map[string][]map[string]any{} // case → rows
	header := map[string][]string{}       // case → the CSV's header
	for i := range cases {
		c := &cases[i]
		stdout, errOut, err := runCmd(t, withFormat(c.args, "jsonl")...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, errOut)
		}
		dec := json.NewDecoder(strings.NewReader(stdout))
		dec.UseNumber()
		for dec.More() {
			var r map[string]any
			if err := dec.Decode(&r); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			want[c.name] = append(want[c.name], r)
		}
		if len(want[c.name]) == 0 && c.table != "reuse_distance" && c.table != "cache_sim_layers" && c.table != "expert_activations" {
			t.Errorf("%s: no rows", c.name)
		}
		for _, format := range c.formats {
			path := filepath.Join(out, c.name+"."+format)
			args := withFormat(c.args, format)
			switch {
			case !c.file:
				stdout, errOut, err := runCmd(t, args...)
				if err != nil {
					t.Fatalf("%s: %v\n%s", c.name, err, errOut)
				}
				if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
					t.Fatal(err)
				}
			case format == "parquet" && c.table != "":
				if _, errOut, err := runCmd(t, append(args, "-o", path)...); err != nil {
					t.Fatalf("%s: %v\n%s", c.name, err, errOut)
				}
				path = filepath.Join(path, c.table+".parquet")
			default:
				if _, errOut, err := runCmd(t, append(args, "-o", path)...); err != nil {
					t.Fatalf("%s: %v\n%s", c.name, err, errOut)
				}
			}
			if format == "csv" {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				recs, err := csv.NewReader(strings.NewReader(string(b))).Read()
				if err != nil {
					t.Fatalf("%s: the CSV has no header: %v", c.name, err)
				}
				header[c.name] = recs
			}
			files = append(files, written{c, format, path})
		}
	}

	// The per-token export is query's rows by token, cell by cell: every
	// column they share holds the same value.
	byToken := map[string]map[string]any{}
	for _, r := range want["query-token-all"] {
		byToken[fmt.Sprint(r["token"])] = r
	}
	for _, r := range want["faults-per-token"] {
		q := byToken[fmt.Sprint(r["token"])]
		if q == nil {
			t.Errorf("faults-per-token: token %v, which query does not have", r["token"])
			continue
		}
		for col, v := range r {
			if qv, shared := q[col]; shared && fmt.Sprint(qv) != fmt.Sprint(v) {
				t.Errorf("token %v %s: faults-per-token %v, query %v", r["token"], col, v, qv)
			}
		}
	}

	// Python, once for every file.
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3, the readers' reference, is missing: %v", err)
	}
	var list strings.Builder
	for _, w := range files {
		if w.format != "parquet" {
			fmt.Fprintf(&list, "%s %s\n", w.path, w.format)
		}
	}
	cmd := exec.Command(py, "-c", fmt.Sprintf("sampleHead, sampleWindow = %d, %d\n", sampleHead, sampleWindow)+pyReadAll)
	cmd.Stdin = strings.NewReader(list.String())
	pyOut, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3: %v", err)
	}
	var pyRead map[string]struct {
		Header []string `json:"header"`
		N      int      `json:"n"`
		Rows   [][2]any `json:"rows"`
	}
	dec := json.NewDecoder(strings.NewReader(string(pyOut)))
	dec.UseNumber()
	if err := dec.Decode(&pyRead); err != nil {
		t.Fatal(err)
	}

	db := ducktest.Open(t)
	cells := 0
	for _, w := range files {
		t.Run(w.c.name+"/"+w.format, func(t *testing.T) {
			ref, head := want[w.c.name], header[w.c.name]
			// The reference's types, by column: what every reader keeps.
			kinds := map[string]byte{}
			for _, r := range ref {
				for col, v := range r {
					if v == "" {
						t.Errorf("JSON %s is \"\": NA or none is null", col)
					}
					if _, k := canon(v); k != 'n' && (kinds[col] == 0 || kinds[col] == 'i' && k == 'f') {
						kinds[col] = k
					}
				}
			}
			// check compares the rows a reader read (n of them, the
			// sampled ones by index) with the reference.
			check := func(reader string, gotHead []string, n int, rows map[int]map[string]any, typed bool) {
				t.Helper()
				if len(ref) > 0 && !slices.Equal(gotHead, head) {
					t.Errorf("%s: header %v, want %v", reader, gotHead, head)
				}
				if n != len(ref) {
					t.Errorf("%s: %d rows, want %d", reader, n, len(ref))
					return
				}
				for _, i := range sampled(n) {
					r, ok := rows[i]
					if !ok {
						t.Errorf("%s: row %d not read", reader, i)
						return
					}
					for _, col := range head {
						ws, wk := canon(ref[i][col])
						gv := r[col]
						if !typed {
							// CSV is text: NA is the empty cell, a number its digits.
							s, _ := gv.(string)
							switch {
							case s == "":
								gv = nil
							case wk == 'i' || wk == 'f':
								gv = json.Number(s)
							}
						}
						gs, gk := canon(gv)
						if typed && gk != 'n' && wk != 'n' && gk != kinds[col] {
							t.Errorf("%s: %s is %c, the JSON's %c (%v)", reader, col, gk, kinds[col], gv)
							return
						}
						if gs != ws {
							t.Errorf("%s row %d %s: %s, want %s", reader, i, col, gs, ws)
							return
						}
						cells++
					}
				}
			}
			if w.format != "parquet" {
				p, ok := pyRead[w.path]
				if !ok {
					t.Fatalf("python did not read %s", w.path)
				}
				rows := map[int]map[string]any{}
				for _, ir := range p.Rows {
					i, _ := ir[0].(json.Number).Int64()
					r, _ := ir[1].(map[string]any)
					rows[int(i)] = r
				}
				check("python "+w.format, p.Header, p.N, rows, w.format != "csv")
			}
			read := map[string]string{"csv": "read_csv", "json": "read_json", "jsonl": "read_json", "parquet": "read_parquet"}[w.format]
			if len(ref) == 0 {
				return // DuckDB's readers take no types from an empty file
			}
			// Every row is read (count), the sampled ones fetched in the
			// file's order (DuckDB keeps insertion order by default).
			src := fmt.Sprintf(`%s('%s')`, read, w.path)
			var n int
			if err := db.QueryRow(`SELECT count(*) FROM ` + src).Scan(&n); err != nil {
				t.Fatalf("duckdb %s: %v", read, err)
			}
			idx := sampled(n)
			got := map[int]map[string]any{}
			var cols []string
			for lo := 0; lo < len(idx); {
				hi := lo
				for hi+1 < len(idx) && idx[hi+1] == idx[hi]+1 {
					hi++
				}
				rows, err := db.Query(fmt.Sprintf(`SELECT * FROM %s LIMIT %d OFFSET %d`, src, hi-lo+1, idx[lo]))
				if err != nil {
					t.Fatalf("duckdb %s: %v", read, err)
				}
				cols, _ = rows.Columns()
				for i := idx[lo]; rows.Next(); i++ {
					vals := ducktest.Row(t, rows, len(cols))
					r := map[string]any{}
					for k, c := range cols {
						r[c] = vals[k]
					}
					got[i] = r
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				rows.Close()
				lo = hi + 1
			}
			check("duckdb "+read, cols, n, got, true)
		})
	}
	t.Logf("%d outputs, %d cells compared", len(files), cells)
	return cells
}

// So do the long outputs of a real recorded run, the shared MoE run that
// the stats and report tests read (llmtest.RecordedMoE, recorded once per
// test binary): its events (over 100,000 rows, where a reader that types
// or quotes from its first 20,480 rows goes wrong), the per-token export
// (against query's rows by token) and per-token-tensor one, and the stats
// tables of a row per token or token × tensor. The tiny run above has
// every other output; each command on a real run costs a store opened
// and read.
func TestEveryOutputOfARecordedRunLoadsInEveryReaderCellByCell(t *testing.T) {
	dir := llmtest.RecordedMoE(t).Dir
	long := []string{"events", "faults-per-token", "query-token-all", "faults-per-token-tensor", "stats-residency", "stats-per_token"}
	if n := checkEveryOutput(t, dir, dir, long); n < 10_000 {
		t.Errorf("compared %d cells of a recorded run", n)
	}
}
