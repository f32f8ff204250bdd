package main

import (
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/ducktest"
	"github.com/iocorr/iocorr/testkit/runtest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// exportParquet runs iocorr export KIND --format parquet into a file.
func exportParquet(t testing.TB, dir, kind string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), kind+".parquet")
	if _, errOut, err := runCmd(t, "export", "-i", dir, kind, "--format", "parquet", "-o", out); err != nil {
		t.Fatalf("export %s: %v\n%s", kind, err, errOut)
	}
	return out
}

// storeSums are the figures a run's store holds, read through store.Store.
type storeSums struct {
	perToken  map[uint32][3]uint64 // faults, major faults, bytes read
	perTensor map[string][3]uint64
	byKind    map[string]uint64 // events per kind
}

func readStoreSums(t testing.TB, dir string) storeSums {
	t.Helper()
	st := storetest.Open(t, dir)
	s := storeSums{perToken: map[uint32][3]uint64{}, perTensor: map[string][3]uint64{}, byKind: map[string]uint64{}}
	if err := st.EachToken(func(ti *event.TokenInfo) error {
		s.perToken[ti.Token] = [3]uint64{ti.Faults, ti.Major, ti.ReadBytes}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Aggs(func(a *event.Agg) error {
		name := st.Tensor(a.Tensor).Name
		v := s.perTensor[name]
		s.perTensor[name] = [3]uint64{v[0] + a.Faults, v[1] + a.Major, v[2] + a.ReadBytes}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.Events(store.EventFilter{}, func(e *event.Event) error {
		s.byKind[e.Kind.String()]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// duckSums reads the same figures from the Parquet exports with DuckDB.
func duckSums(t testing.TB, db *sql.DB, tokens, tensors, events string) storeSums {
	t.Helper()
	s := storeSums{perToken: map[uint32][3]uint64{}, perTensor: map[string][3]uint64{}, byKind: map[string]uint64{}}
	query := func(q string, scan func(*sql.Rows) error) {
		t.Helper()
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				t.Fatal(err)
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	duckSumsBy(query, "token", tokens, s.perToken)
	duckSumsBy(query, "tensor", tensors, s.perTensor)
	query(fmt.Sprintf(`SELECT kind, count(*) FROM '%s' GROUP BY kind`, events), func(r *sql.Rows) error {
		var kind string
		var n uint64
		err := r.Scan(&kind, &n)
		s.byKind[kind] = n
		return err
	})
	return s
}

// duckSumsBy reads into into the faults, major faults and bytes read of file
// (a Parquet export) summed by its column col.
func duckSumsBy[K comparable](query func(string, func(*sql.Rows) error), col, file string, into map[K][3]uint64) {
	query(fmt.Sprintf(`SELECT %s, sum(faults)::UBIGINT, sum(major_faults)::UBIGINT, sum(bytes_read)::UBIGINT
		FROM '%s' GROUP BY %s`, col, file, col), func(r *sql.Rows) error {
		var k K
		var v [3]uint64
		err := r.Scan(&k, &v[0], &v[1], &v[2])
		into[k] = v
		return err
	})
}

// checkParquetAgreesWithStore exports a run's per-token, per-token-tensor
// and events tables to Parquet and checks that DuckDB's sums of them equal
// the store's.
func checkParquetAgreesWithStore(t *testing.T, dir string) storeSums {
	t.Helper()
	want := readStoreSums(t, dir)
	got := duckSums(t, ducktest.Open(t), exportParquet(t, dir, "faults-per-token"), exportParquet(t, dir, "faults-per-token-tensor"),
		exportParquet(t, dir, "events"))
	for name, m := range map[string][2]any{"per token": {got.perToken, want.perToken}, "per tensor": {got.perTensor, want.perTensor},
		"events by kind": {got.byKind, want.byKind}} {
		if g, w := fmt.Sprint(m[0]), fmt.Sprint(m[1]); g != w {
			t.Errorf("%s: DuckDB sums\n%s\nthe store has\n%s", name, g, w)
		}
	}
	return want
}

func TestParquetExportsSumInDuckDBToTheStore(t *testing.T) {
	want := checkParquetAgreesWithStore(t, runtest.TinyRun(t))
	// The tiny run's totals, as TestExportSumsEqualTheTotals knows them,
	// so that an empty store cannot agree with empty files.
	var faults, read uint64
	for _, v := range want.perToken {
		faults, read = faults+v[0], read+v[2]
	}
	if faults != 10 || read != 3*4096 || want.byKind["fault"] != 10 || len(want.perTensor) < 3 {
		t.Errorf("store: %d faults, %d bytes read, %v events, %d tensors", faults, read, want.byKind, len(want.perTensor))
	}
}

// The columns are the CSV's, in its order, with types a reader needs
// no cast for.
func TestParquetColumnsAreTheCSVsWithTheirTypes(t *testing.T) {
	dir := runtest.TinyRun(t)
	db := ducktest.Open(t)
	for _, kind := range exportKinds {
		t.Run(kind, func(t *testing.T) {
			csvOut, _, err := runCmd(t, "export", "-i", dir, kind)
			if err != nil {
				t.Fatal(err)
			}
			header := strings.TrimSpace(strings.SplitN(csvOut, "\n", 2)[0])
			rows, err := db.Query(fmt.Sprintf(`SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM '%s')`, exportParquet(t, dir, kind)))
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var names []string
			types := map[string]string{}
			for rows.Next() {
				var n, typ string
				if err := rows.Scan(&n, &typ); err != nil {
					t.Fatal(err)
				}
				names = append(names, n)
				types[n] = typ
			}
			if got := strings.Join(names, ","); got != header {
				t.Errorf("Parquet columns\n%s\nCSV header\n%s", got, header)
			}
			want := map[string]string{"token": "UINTEGER", "phase": "VARCHAR", "faults": "UBIGINT", "bytes_read": "UBIGINT",
				"fault_stall_ns": "UBIGINT", "start_ns": "UBIGINT", "n_tokens": "INTEGER", "layer": "INTEGER", "expert": "INTEGER",
				"offset": "BIGINT", "ts_ns": "UBIGINT", "tensor": "VARCHAR"}
			for n, typ := range types {
				if w, ok := want[n]; ok && typ != w {
					t.Errorf("column %s is %s, want %s", n, typ, w)
				}
			}
		})
	}
}

// The run's status is the file's key-value metadata "run_status": the
// Status() line of a partial run, "complete" otherwise.
func TestParquetCarriesTheRunStatus(t *testing.T) {
	dir := runtest.TinyRun(t)
	status := func() string {
		var v string
		err := ducktest.Open(t).QueryRow(fmt.Sprintf(`SELECT decode(value) FROM parquet_kv_metadata('%s') WHERE decode(key) = 'run_status'`,
			exportParquet(t, dir, "faults-per-token"))).Scan(&v)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if got := status(); got != "complete" {
		t.Errorf("finished run: run_status %q, want complete", got)
	}
	meta := unfinish(t, dir)
	if got, want := status(), meta.Status(); got != want {
		t.Errorf("unfinished run: run_status %q, want %q", got, want)
	}
}

func TestParquetNeedsAnOutputFile(t *testing.T) {
	dir := runtest.TinyRun(t)
	out, _, err := runCmd(t, "export", "-i", dir, "events", "--format", "parquet")
	if err == nil || !strings.Contains(err.Error(), "give -o FILE") || out != "" {
		t.Errorf("parquet to stdout: %v, %d bytes written", err, len(out))
	}
}
