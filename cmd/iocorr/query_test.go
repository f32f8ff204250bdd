package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/runtest"
)

// unfinish makes the run in dir one whose recorder did not finish, and
// returns its metadata.
func unfinish(t *testing.T, dir string) *rundir.Meta {
	t.Helper()
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	meta.Finished = false
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	return meta
}

// csvTable parses CSV output into rows keyed by column name.
func csvTable(t *testing.T, out string) []map[string]string {
	t.Helper()
	recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("bad CSV (%v):\n%s", err, out)
	}
	var rows []map[string]string
	for _, r := range recs[1:] {
		m := map[string]string{}
		for i, c := range recs[0] {
			m[c] = r[i]
		}
		rows = append(rows, m)
	}
	return rows
}

func sumColumn(t *testing.T, rows []map[string]string, col string) uint64 {
	t.Helper()
	var s uint64
	for _, r := range rows {
		v, err := strconv.ParseUint(r[col], 10, 64)
		if err != nil {
			t.Fatalf("column %s: %v", col, err)
		}
		s += v
	}
	return s
}

// jsonRows runs an iocorr command printing --format json and decodes it,
// numbers as json.Number so that counters compare exactly.
func jsonRows(t *testing.T, args ...string) []map[string]any {
	t.Helper()
	rows, _ := jsonOut(t, args...)
	return rows
}

// jsonOut is jsonRows with what the command said on stderr.
func jsonOut(t *testing.T, args ...string) ([]map[string]any, string) {
	t.Helper()
	out, errOut, err := runCmd(t, append(args, "--format", "json")...)
	if err != nil {
		t.Fatalf("%q: %v\n%s", args, err, errOut)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var rows []map[string]any
	if err := dec.Decode(&rows); err != nil {
		t.Fatalf("%q: %v\n%s", args, err, out)
	}
	return rows, errOut
}

// jsonUint is a JSON number as a uint64; ok is false for null.
func jsonUint(t *testing.T, v any) (n uint64, ok bool) {
	t.Helper()
	if v == nil {
		return 0, false
	}
	n, err := strconv.ParseUint(string(v.(json.Number)), 10, 64)
	if err != nil {
		t.Fatalf("%v: %v", v, err)
	}
	return n, true
}

func TestQueryTensorPrintsOneRowPerToken(t *testing.T) {
	dir := runtest.TinyRun(t)
	out, _, err := runCmd(t, "query", "-i", dir, "--tensor", "blk.*.ffn_down.weight", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	rows := csvTable(t, out)
	if len(rows) != 3 {
		t.Fatalf("got %d rows, want one per token:\n%s", len(rows), out)
	}
	for i, r := range rows {
		phase := "decode"
		if i == 0 {
			phase = "prefill"
		}
		want := map[string]string{"token": strconv.Itoa(i + 1), "phase": phase, "faults": "2", "major_faults": "1", "minor_faults": "1",
			"fault_stall_ns": "20", "pages_added": "2", "bytes_read": "4096", "pages_evicted": "1", "block_requests": "1"}
		for k, v := range want {
			if r[k] != v {
				t.Errorf("token %d: %s = %q, want %q", i+1, k, r[k], v)
			}
		}
	}
	// The table is for people: sizes and times in units.
	table, _, err := runCmd(t, "query", "-i", dir, "--tensor", "blk.0.ffn_down.weight")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table, "4.0 KiB") || !strings.Contains(table, "10 ns") || !strings.HasPrefix(table, "TOKEN") {
		t.Errorf("table without human units:\n%s", table)
	}
}

func TestQueryFiltersGroupsSortsAndTops(t *testing.T) {
	dir := runtest.TinyRun(t)
	tests := []struct {
		name string
		args []string
		keys string // the first column of every row, in order
	}{
		{"every token", nil, "1 2 3"},
		{"by tensor", []string{"--by", "tensor"}, "blk.0.ffn_down.weight blk.1.ffn_down.weight blk.1.ffn_down_exps.weight"},
		{"pseudo tensors with --all", []string{"--by", "tensor", "--all"}, "[anonymous] blk.0.ffn_down.weight blk.1.ffn_down.weight blk.1.ffn_down_exps.weight"},
		{"token range", []string{"--token", "2-3"}, "2 3"},
		{"one token", []string{"--token", "2"}, "2"},
		{"layer by tensor", []string{"--layer", "1", "--by", "tensor"}, "blk.1.ffn_down.weight blk.1.ffn_down_exps.weight"},
		{"by layer", []string{"--by", "layer"}, "0 1"},
		{"expert", []string{"--expert", "2", "--by", "token"}, "2"},
		{"by expert", []string{"--tensor", "blk.1.ffn_down_exps.weight", "--by", "expert"}, "1 2 3"},
		{"phase", []string{"--phase", "prefill"}, "1"},
		{"by phase", []string{"--by", "phase"}, "prefill decode"},
		{"op by tensor", []string{"--op", "mul_mat_id", "--by", "tensor"}, "blk.1.ffn_down_exps.weight"},
		{"by op", []string{"--by", "op"}, "MUL_MAT MUL_MAT_ID"},
		{"sorted by minor faults, top 1", []string{"--by", "tensor", "--sort", "minor_faults", "--top", "1"}, "blk.1.ffn_down.weight"},
		{"sorted by an export column name", []string{"--by", "tensor", "--sort", "bytes_read", "--top", "1"}, "blk.0.ffn_down.weight"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"query", "-i", dir, "--format", "json"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			var rows []map[string]any
			if err := json.Unmarshal([]byte(out), &rows); err != nil {
				t.Fatalf("bad JSON (%v):\n%s", err, out)
			}
			by := "token"
			for i, a := range tc.args {
				if a == "--by" {
					by = tc.args[i+1]
				}
			}
			var keys []string
			for _, r := range rows {
				switch v := r[by].(type) {
				case string:
					keys = append(keys, v)
				case float64:
					keys = append(keys, strconv.Itoa(int(v)))
				}
			}
			if got := strings.Join(keys, " "); got != tc.keys {
				t.Errorf("rows %q, want %q", got, tc.keys)
			}
		})
	}
}

func TestQueryBadInputIsOneLineError(t *testing.T) {
	dir := runtest.TinyRun(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown tensor names the closest", []string{"--tensor", "blk.0.ffn_dwn.weight"}, "closest: blk.0.ffn_down.weight"},
		{"glob that matches nothing", []string{"--tensor", "blk.*.attn_q.weight"}, "unknown tensor"},
		{"bad glob", []string{"--tensor", "blk.[.weight"}, "bad tensor pattern"},
		{"bad token", []string{"--token", "two"}, "bad --token"},
		{"reversed token range", []string{"--token", "3-1"}, "bad --token"},
		{"layer without tensors", []string{"--layer", "7"}, "no tensor in layer 7 (the model has layers 0-1)"},
		{"negative expert", []string{"--expert", "-3"}, "expert -3 out of range"},
		{"unknown op lists the known", []string{"--op", "SOFT_MAX"}, "this run has: MUL_MAT, MUL_MAT_ID"},
		{"unknown phase", []string{"--phase", "warmup"}, "unknown phase"},
		{"unknown group", []string{"--by", "colour"}, "cannot group by"},
		{"unknown sort column", []string{"--sort", "speed"}, "cannot sort by"},
		{"negative top", []string{"--top", "-1"}, "top must not be negative"},
		{"no directory", []string{"-i", "/nonexistent"}, "/nonexistent is not a run directory (no meta.json)"},
		{"a directory that is no run", []string{"-i", t.TempDir()}, "is not a run directory"},
		{"a run not yet ingested", []string{"-i", notIngested(t)}, "no store: run `iocorr ingest` first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"query", "-i", dir}, tc.args...)...)
			requireOneLineError(t, err, "query", tc.want)
		})
	}
}

func TestExportSumsEqualTheTotals(t *testing.T) {
	dir := runtest.TinyRun(t)
	export := func(kind string) []map[string]string {
		out, _, err := runCmd(t, "export", "-i", dir, kind)
		if err != nil {
			t.Fatal(err)
		}
		return csvTable(t, out)
	}
	perToken, perTensor := export("faults-per-token"), export("faults-per-token-tensor")
	if len(perToken) != 3 {
		t.Fatalf("%d token rows, want 3", len(perToken))
	}
	want := map[string]uint64{"faults": 10, "major_faults": 6, "minor_faults": 4, "fault_stall_ns": 100, "pages_added": 9,
		"bytes_added": 9 * 4096, "bytes_read": 3 * 4096, "block_requests": 3, "pages_evicted": 3, "bytes_evicted": 3 * 4096}
	for col, n := range want {
		if got := sumColumn(t, perToken, col); got != n {
			t.Errorf("faults-per-token %s sums to %d, want %d", col, got, n)
		}
		if got := sumColumn(t, perTensor, col); got != n {
			t.Errorf("faults-per-token-tensor %s sums to %d, want %d", col, got, n)
		}
	}
	r := perToken[0]
	if r["token"] != "1" || r["phase"] != "prefill" || r["n_tokens"] != "4" || r["tensors_touched"] != "3" || r["experts_touched"] != "1" ||
		r["duration_ns"] == "" || r["start_ns"] == "" {
		t.Errorf("token 1 row %v", r)
	}
	// One row per (token, tensor, expert), with the op reading the weight.
	var exps int
	for _, r := range perTensor {
		if r["tensor"] == "blk.1.ffn_down_exps.weight" {
			exps++
			if r["op"] != "MUL_MAT_ID" || r["expert"] != r["token"] || r["layer"] != "1" {
				t.Errorf("expert row %v", r)
			}
		}
	}
	if exps != 3 {
		t.Errorf("%d expert rows, want 3", exps)
	}
	events := export("events")
	var faults, read uint64
	for _, e := range events {
		switch e["kind"] {
		case "fault":
			faults++
		case "block":
			b, _ := strconv.ParseUint(e["bytes"], 10, 64)
			read += b
		}
	}
	if faults != want["faults"] || read != want["bytes_read"] {
		t.Errorf("events: %d faults, %d bytes read, want %d and %d", faults, read, want["faults"], want["bytes_read"])
	}
}

func TestExportFormats(t *testing.T) {
	dir := runtest.TinyRun(t)
	t.Run("csv is RFC 4180", func(t *testing.T) {
		out, _, err := runCmd(t, "export", "-i", dir, "faults-per-token")
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.SplitAfter(out, "\r\n")
		if len(lines) != 5 || lines[4] != "" || !strings.HasPrefix(lines[0], "token,phase,n_tokens,request,pseudo_request,start_ns,duration_ns,faults,") {
			t.Errorf("want a header and 3 records, each ended by CRLF:\n%q", out)
		}
	})
	t.Run("json is an array of objects in column order", func(t *testing.T) {
		out, _, err := runCmd(t, "export", "-i", dir, "faults-per-token-tensor", "--format", "json")
		if err != nil {
			t.Fatal(err)
		}
		var rows []map[string]any
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 10 {
			t.Fatalf("%d rows (%v):\n%s", len(rows), err, out)
		}
		if !strings.HasPrefix(strings.TrimSpace(out), `[`+"\n"+`{"token":1,"phase":"prefill","tensor":`) {
			t.Errorf("columns out of order:\n%s", out)
		}
	})
	t.Run("jsonl is an object per line", func(t *testing.T) {
		out, _, err := runCmd(t, "export", "-i", dir, "events", "--format", "jsonl")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(strings.NewReader(out))
		n := 0
		for sc.Scan() {
			var e map[string]any
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				t.Fatalf("line %d: %v: %s", n+1, err, sc.Text())
			}
			n++
		}
		if n != 10+9+3+3 {
			t.Errorf("%d events, want 25 (10 faults, 9 adds, 3 reads, 3 evictions)", n)
		}
	})
	t.Run("empty json is an empty array", func(t *testing.T) {
		out, _, err := runCmd(t, "export", "-i", dir, "events", "--format", "json", "--token", "9")
		if err != nil || strings.TrimSpace(out) != "[]" {
			t.Errorf("got %q, %v, want []", out, err)
		}
	})
}

func TestExportEventsFilters(t *testing.T) {
	dir := runtest.TinyRun(t)
	tests := []struct {
		args  []string
		n     int
		check func(map[string]string) bool
	}{
		{[]string{"--tensor", "blk.0.ffn_down.weight"}, 3 * 3, func(e map[string]string) bool { return e["tensor"] == "blk.0.ffn_down.weight" }},
		{[]string{"--token", "2"}, 8, func(e map[string]string) bool { return e["token"] == "2" }},
		{[]string{"--expert", "3"}, 2, func(e map[string]string) bool { return e["expert"] == "3" }},
		{[]string{"--layer", "1"}, 3 * 5, func(e map[string]string) bool { return e["layer"] == "1" }},
		{[]string{"--layer", "1", "--token", "1-2"}, 2 * 5, func(e map[string]string) bool { return e["layer"] == "1" && e["token"] != "3" }},
		{[]string{"--op", "MUL_MAT_ID"}, 6, func(e map[string]string) bool { return e["op"] == "MUL_MAT_ID" }},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, _, err := runCmd(t, append([]string{"export", "-i", dir, "events"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			evs := csvTable(t, out)
			if len(evs) != tc.n {
				t.Errorf("%d events, want %d", len(evs), tc.n)
			}
			for _, e := range evs {
				if !tc.check(e) {
					t.Errorf("event %v passed the filter", e)
				}
			}
		})
	}
}

func TestExportToAFileLeavesNothingElse(t *testing.T) {
	dir := runtest.TinyRun(t)
	outDir := t.TempDir()
	out := filepath.Join(outDir, "tokens.csv")
	if _, _, err := runCmd(t, "export", "-i", dir, "faults-per-token", "-o", out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil || !strings.HasPrefix(string(b), "token,") {
		t.Fatalf("export file %q, %v", b, err)
	}
	names := dirNames(outDir)
	if !slices.Equal(names, []string{"tokens.csv", "tokens.na.json"}) {
		t.Errorf("the output directory holds %v, want only the export and its sidecar", names)
	}
	if _, _, err := runCmd(t, "export", "-i", dir, "faults-per-token", "-o", filepath.Join(outDir, "missing", "x.csv")); err == nil ||
		!strings.HasPrefix(err.Error(), "export: ") {
		t.Errorf("export into a missing directory: %v, want an export: error", err)
	}
}

func TestExportRejectsBadUsage(t *testing.T) {
	dir := runtest.TinyRun(t)
	for _, args := range [][]string{{"bogus"}, {"events", "--format", "xml"}, {}, {"faults-per-token", "--tensor", "x"},
		{"events", "--token", "x"}, {"events", "extra"}, {"events", "--layer", "7"}} {
		_, _, err := runCmd(t, append([]string{"export", "-i", dir}, args...)...)
		if err == nil || !strings.HasPrefix(err.Error(), "export: ") || strings.Contains(err.Error(), "\n") {
			t.Errorf("export %q: %v, want a one-line export: error", args, err)
		}
	}
	_, _, err := runCmd(t, "export", "-i", dir, "events", "--tensor", "blk.0.ffn_dwn.weight")
	if err == nil || !strings.Contains(err.Error(), "closest: blk.0.ffn_down.weight") {
		t.Errorf("unknown tensor: %v", err)
	}
}

func TestIngestIsIdempotentAndRejectsANonRun(t *testing.T) {
	dir := runtest.TinyRun(t)
	_, errOut, err := runCmd(t, "ingest", dir)
	if err != nil || !strings.Contains(errOut, "up to date") {
		t.Errorf("second ingest: %v %q, want up to date", err, errOut)
	}
	if _, _, err := runCmd(t, "ingest", t.TempDir()); err == nil || !strings.HasPrefix(err.Error(), "ingest: ") ||
		!strings.Contains(err.Error(), "not a run directory") {
		t.Errorf("ingest of an empty directory: %v", err)
	}
}

// notIngested is a run directory with metadata and no store.
func notIngested(t *testing.T) string {
	dir := t.TempDir()
	if err := rundir.WriteMeta(dir, &rundir.Meta{Complete: true, Finished: true}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A run whose recorder did not finish says so on stderr in every format,
// and in-band where a program reads it: a leading '#' comment in CSV
// (which a CSV reader told of comments skips), a run_status field in
// every JSON object; tables stay tables.
func TestAnUnfinishedRunSaysSoInEveryOutput(t *testing.T) {
	dir := runtest.TinyRun(t)
	meta := unfinish(t, dir)
	status := meta.Status()
	for _, cmd := range [][]string{{"query", "--by", "tensor"}, {"export", "faults-per-token"}, {"export", "events"}} {
		for _, format := range []string{"table", "csv", "json", "jsonl"} {
			t.Run(strings.Join(cmd, " ")+" "+format, func(t *testing.T) {
				out, errOut, err := runCmd(t, append([]string{cmd[0], "-i", dir}, append(cmd[1:], "--format", format)...)...)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(errOut, "warning: "+status) {
					t.Errorf("stderr %q does not say %q", errOut, status)
				}
				switch format {
				case "table":
					if strings.Contains(out, status) {
						t.Errorf("the table carries the status:\n%s", out)
					}
				case "csv":
					// RFC 4180 has no comments: the status is stderr's (and
					// the sidecar's), the first line the header.
					recs, err := csv.NewReader(strings.NewReader(out)).ReadAll()
					if err != nil || len(recs) < 2 || strings.Contains(out, status) || !slices.Contains(recs[0], "token") && !slices.Contains(recs[0], "tensor") && !slices.Contains(recs[0], "ts_ns") {
						t.Errorf("CSV: %d records, %v; want a header first and no status:\n%s", len(recs), err, out)
					}
				default:
					var rows []map[string]any
					if format == "json" {
						if err := json.Unmarshal([]byte(out), &rows); err != nil {
							t.Fatal(err)
						}
					} else {
						for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
							var row map[string]any
							if err := json.Unmarshal([]byte(line), &row); err != nil {
								t.Fatal(err)
							}
							rows = append(rows, row)
						}
					}
					for _, row := range rows {
						if row["run_status"] != status {
							t.Fatalf("row %v has no run_status %q", row, status)
						}
					}
					if len(rows) == 0 {
						t.Fatal("no rows")
					}
				}
			})
		}
	}
}

// Event classes are names in every format: minor, major, unaccounted for
// faults, read or write for block requests, empty for page-cache events.
func TestExportEventsNameTheirClassInEveryFormat(t *testing.T) {
	dir := runtest.TinyRun(t)
	// The tiny run's faults and block reads, in time order, for --token 1.
	want := []string{"major", "", "minor", "", "major", "", "read", ""}
	for _, format := range []string{"table", "csv", "json", "jsonl"} {
		t.Run(format, func(t *testing.T) {
			out, _, err := runCmd(t, "export", "-i", dir, "events", "--token", "1", "--format", format)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			switch format {
			case "table":
				lines := strings.Split(strings.TrimSpace(out), "\n")
				for _, l := range lines[1:] {
					f := strings.Fields(l)
					if f[1] == "fault" || f[1] == "block" {
						got = append(got, f[2])
					} else {
						got = append(got, "")
					}
				}
			case "csv":
				for _, r := range csvTable(t, out) {
					got = append(got, r["class"])
				}
			case "json":
				var rows []map[string]any
				if err := json.Unmarshal([]byte(out), &rows); err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					class, _ := r["class"].(string) // null where no class applies
					got = append(got, class)
				}
			case "jsonl":
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					var r map[string]any
					if err := json.Unmarshal([]byte(line), &r); err != nil {
						t.Fatal(err)
					}
					class, _ := r["class"].(string) // null where no class applies
					got = append(got, class)
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("classes %q, want %q\n%s", got, want, out)
			}
		})
	}
}

// A run whose build had no probe point for the router's picks says so:
// SELECTED is NA (empty in CSV, null in JSON) with the reason on stderr,
// never a column of zeros that reads as "never picked".
func TestQueryByExpertSaysSelectedIsNAWhenPicksWereNotProbed(t *testing.T) {
	for _, tc := range []struct {
		name   string
		probes []rundir.Probe
		na     bool
	}{
		{"get_rows probed", []rundir.Probe{{Kind: "uprobe", Target: "lib.so", Symbol: ggml.SymGetRows}}, false},
		{"get_rows missing", []rundir.Probe{{Kind: "uprobe", Target: "lib.so", Symbol: ggml.SymDecode}}, true},
		{"get_rows failed to attach", []rundir.Probe{{Kind: "uprobe", Target: "lib.so", Symbol: ggml.SymGetRows, Error: "EPERM"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := runtest.TinyRun(t)
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			m.Probes = tc.probes
			if err := rundir.WriteMeta(dir, m); err != nil {
				t.Fatal(err)
			}
			// Left out by default, NA with --all-columns; said once on stderr.
			for _, all := range []bool{false, true} {
				args := []string{"query", "-i", dir, "--tensor", "blk.1.ffn_down_exps.weight", "--by", "expert"}
				if all {
					args = append(args, "--all-columns")
				}
				rows, errOut := jsonOut(t, args...)
				if len(rows) != 3 {
					t.Fatalf("%d rows: %v", len(rows), rows)
				}
				for _, r := range rows {
					got, present := r[store.Selected]
					if present != (all || !tc.na) || (got == nil) != tc.na {
						t.Errorf("all-columns %v: expert %v: selected %v (present %v), want NA %v", all, r["expert"], got, present, tc.na)
					}
					if _, isInt := r["expert"].(json.Number); !isInt {
						t.Errorf("expert key %v (%T), want an integer", r["expert"], r["expert"])
					}
				}
				note := "selected left out (--all-columns keeps them, NA): the router's expert picks were not recorded"
				if all {
					note = "selected NA: the router's expert picks were not recorded"
				}
				if noted := strings.Count(errOut, note); noted != map[bool]int{true: 1}[tc.na] {
					t.Errorf("stderr %q: said %d times, want a note %v", errOut, noted, tc.na)
				}
			}
		})
	}
}
