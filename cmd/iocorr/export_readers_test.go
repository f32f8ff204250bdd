package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/ducktest"
	"github.com/iocorr/iocorr/testkit/runtest"
)

// pyRows reads path (csv, json or jsonl) with Python (pyReadAll), every row.
func pyRows(t *testing.T, path, format string) (header []string, rows []map[string]any) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3, the readers' reference, is missing: %v", err)
	}
	cmd := exec.Command(py, "-c", "sampleHead, sampleWindow = 1 << 62, 0\n"+pyReadAll)
	cmd.Stdin = strings.NewReader(path + " " + format + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python3 reading %s: %v", path, err)
	}
	var got map[string]struct {
		Header []string `json:"header"`
		Rows   [][2]any `json:"rows"`
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	dec.UseNumber()
	if err := dec.Decode(&got); err != nil {
		t.Fatal(err)
	}
	for _, ir := range got[path].Rows {
		r, _ := ir[1].(map[string]any)
		rows = append(rows, r)
	}
	return got[path].Header, rows
}

// defaultTierRun is the tiny run as the default tier records it: no
// page-cache counters.
func defaultTierRun(t *testing.T) string {
	dir := runtest.TinyRun(t)
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
	return dir
}

// Every export, and query's output, loads in Python's csv and json and in
// DuckDB's read_csv, read_json and read_parquet with their defaults: the
// header is the first line, the unmeasured columns are left out, keys
// are integers (null for none), NA is an empty cell or null, and the
// cells are query's.
func TestExportsLoadInPythonAndDuckDBWithTheirDefaults(t *testing.T) {
	dir := defaultTierRun(t)
	// The oracle: query's rows by token and by tensor.
	perToken := map[string][2]string{} // token → major_faults, bytes_read
	for _, r := range jsonRows(t, "query", "-i", dir, "--all") {
		perToken[fmt.Sprint(r["token"])] = [2]string{fmt.Sprint(r["major_faults"]), fmt.Sprint(r["bytes_read"])}
	}
	perLayer := sumsBy(t, "layer", jsonRows(t, "query", "-i", dir, "--by", "layer"))
	// With --all, the memory outside the model's tensors ([anonymous],
	// ...) has rows of its own: no layer (null), the pseudo tensor's name
	// beside it. The token × tensor rows have it too, also of no layer.
	allRows := jsonRows(t, "query", "-i", dir, "--by", "layer", "--all")
	allLayers := sumsBy(t, "layer", allRows)
	pseudos := 0
	for _, r := range allRows {
		if r["pseudo_tensor"] != nil {
			pseudos++
			if r["layer"] != nil {
				t.Errorf("query --by layer --all: pseudo tensor %v has layer %v, want null", r["pseudo_tensor"], r["layer"])
			}
		}
	}
	perExpert := sumsBy(t, "expert", jsonRows(t, "query", "-i", dir, "--by", "expert", "--all"))
	if len(perToken) != 3 || perLayer["0"] == "" || allLayers[""] == "" || pseudos == 0 || perExpert[""] == "" {
		t.Fatalf("query: tokens %v, layers %v, with --all %v (%d pseudo tensors), experts %v", perToken, perLayer, allLayers, pseudos, perExpert)
	}
	out := t.TempDir()
	db := ducktest.Open(t)
	type export struct {
		name string
		args []string
		// key and figure: the columns whose sums by key equal want.
		key, figure string
		want        map[string]string
		// extra are columns the header must have besides key.
		extra []string
	}
	exports := []export{
		{"faults-per-token", []string{"export", "-i", dir, "faults-per-token"}, "token", "bytes_read", nil, nil},
		{"faults-per-token-tensor", []string{"export", "-i", dir, "faults-per-token-tensor"}, "layer", "major_faults", allLayers, nil},
		{"events", []string{"export", "-i", dir, "events"}, "token", "bytes", nil, nil},
		{"query-by-token", []string{"query", "-i", dir, "--all"}, "token", "major_faults", nil, nil},
		{"query-by-layer", []string{"query", "-i", dir, "--by", "layer"}, "layer", "major_faults", perLayer, nil},
		{"query-by-layer-all", []string{"query", "-i", dir, "--by", "layer", "--all"}, "layer", "major_faults", allLayers, []string{"pseudo_tensor"}},
		{"query-by-expert-all", []string{"query", "-i", dir, "--by", "expert", "--all"}, "expert", "major_faults", perExpert, nil},
	}
	exports[0].want = map[string]string{}
	exports[3].want = map[string]string{}
	for tok, v := range perToken {
		exports[0].want[tok] = v[1]
		exports[3].want[tok] = v[0]
	}
	// The events' bytes of block reads by token are the tokens' bytes read.
	exports[2].want = exports[0].want
	for _, ex := range exports {
		for _, format := range []string{"csv", "json", "jsonl", "parquet"} {
			if format == "parquet" && ex.args[0] == "query" {
				continue // query prints text
			}
			t.Run(ex.name+"/"+format, func(t *testing.T) {
				path := filepath.Join(out, ex.name+"."+format)
				args := append(slices.Clone(ex.args), "--format", format)
				if ex.args[0] == "query" {
					stdout, errOut, err := runCmd(t, args...)
					if err != nil {
						t.Fatalf("%v\n%s", err, errOut)
					}
					if err := os.WriteFile(path, []byte(stdout), 0o644); err != nil {
						t.Fatal(err)
					}
				} else if _, errOut, err := runCmd(t, append(args, "-o", path)...); err != nil {
					t.Fatalf("%v\n%s", err, errOut)
				}
				filter := ""
				if ex.name == "events" {
					filter = " WHERE kind = 'block'"
				}
				var header []string
				if format != "parquet" {
					var rows []map[string]any
					header, rows = pyRows(t, path, format)
					got := map[string]uint64{}
					for _, r := range rows {
						if ex.name == "events" && r["kind"] != "block" {
							continue
						}
						key := r[ex.key]
						if key == nil {
							key = ""
						} else if format != "csv" {
							if _, isNum := key.(json.Number); !isNum {
								t.Fatalf("python: %s %v is %T, want a number", ex.key, key, key)
							}
						}
						n, err := strconv.ParseUint(fmt.Sprint(r[ex.figure]), 10, 64)
						if err != nil {
							t.Fatalf("python: %s %v: %v", ex.figure, r[ex.figure], err)
						}
						got[fmt.Sprint(key)] += n
					}
					checkSums(t, "python", got, ex.want)
				}
				read := map[string]string{"csv": "read_csv", "json": "read_json", "jsonl": "read_json", "parquet": "read_parquet"}[format]
				q := fmt.Sprintf(`SELECT coalesce(CAST(%s AS VARCHAR), ''), sum(%s)::UBIGINT, any_value(typeof(%s)) FROM %s('%s')%s GROUP BY 1`,
					ex.key, ex.figure, ex.key, read, path, filter)
				rows, err := db.Query(q)
				if err != nil {
					t.Fatalf("duckdb %s: %v", q, err)
				}
				got := map[string]uint64{}
				for rows.Next() {
					var k, typ string
					var n uint64
					if err := rows.Scan(&k, &n, &typ); err != nil {
						t.Fatal(err)
					}
					if !strings.Contains(typ, "INT") {
						t.Errorf("duckdb %s: %s is %s, want an integer", read, ex.key, typ)
					}
					got[k] += n
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				checkSums(t, "duckdb "+read, got, ex.want)
				// The header, as DuckDB read it: the columns of the run's
				// tier, pages_added left out.
				cols, err := db.Query(fmt.Sprintf(`SELECT column_name FROM (DESCRIBE SELECT * FROM %s('%s'))`, read, path))
				if err != nil {
					t.Fatal(err)
				}
				var duckHeader []string
				for cols.Next() {
					var c string
					if err := cols.Scan(&c); err != nil {
						t.Fatal(err)
					}
					duckHeader = append(duckHeader, c)
				}
				if header != nil && !slices.Equal(header, duckHeader) {
					t.Errorf("python's header %v, duckdb's %v", header, duckHeader)
				}
				if !slices.Contains(duckHeader, ex.key) || slices.Contains(duckHeader, "pages_added") {
					t.Errorf("header %v: want %s, and pages_added left out", duckHeader, ex.key)
				}
				for _, c := range ex.extra {
					if !slices.Contains(duckHeader, c) {
						t.Errorf("header %v: want %s", duckHeader, c)
					}
				}
			})
		}
	}
}

// sumsBy sums query's major faults of rows by key (null as ""): the
// oracle of the exports' sums by the same key.
func sumsBy(t *testing.T, key string, rows []map[string]any) map[string]string {
	t.Helper()
	sums := map[string]uint64{}
	for _, r := range rows {
		k := ""
		if r[key] != nil {
			k = fmt.Sprint(r[key])
		}
		n, ok := jsonUint(t, r["major_faults"])
		if !ok {
			t.Fatalf("query: major_faults of %s %q is null", key, k)
		}
		sums[k] += n
	}
	out := map[string]string{}
	for k, n := range sums {
		out[k] = strconv.FormatUint(n, 10)
	}
	return out
}

// checkSums compares sums by key with want.
func checkSums(t *testing.T, reader string, got map[string]uint64, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d keys %v, want %d %v", reader, len(got), got, len(want), want)
	}
	for k, w := range want {
		if g := strconv.FormatUint(got[k], 10); g != w {
			t.Errorf("%s: key %q sums to %s, query says %s", reader, k, g, w)
		}
	}
}
