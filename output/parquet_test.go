package output

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/testkit/ducktest"
)

// writeParquet writes rows of cols as a Parquet file and returns its path.
func writeParquet(t *testing.T, cols []Column, rows [][]Cell) string {
	t.Helper()
	var buf bytes.Buffer
	pw := New(&buf, Parquet, cols)
	for _, row := range rows {
		if err := pw.Row(row...); err != nil {
			t.Fatal(err)
		}
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "out.parquet")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// NA is null, never 0: a number that was not measured stays unknown to
// the reader too.
func TestParquetNAIsNull(t *testing.T) {
	cols := []Column{{"token", Uint32, false}, {"start_ns", Uint64, true}, {"layer", Int32, false}}
	path := writeParquet(t, cols, [][]Cell{{Num(0), NA(), Num(-1)}, {Num(1), Num(uint64(5)), Num(2)}})
	var nulls, zeros, sumLayer int64
	err := ducktest.Open(t).QueryRow(fmt.Sprintf(`SELECT count(*) FILTER (start_ns IS NULL), count(*) FILTER (start_ns = 0), sum(layer)
		FROM '%s'`, path)).Scan(&nulls, &zeros, &sumLayer)
	if err != nil {
		t.Fatal(err)
	}
	if nulls != 1 || zeros != 0 || sumLayer != 1 {
		t.Errorf("%d nulls, %d zeros, layers sum to %d; want 1 null, no zero, 1", nulls, zeros, sumLayer)
	}
	// A value a column cannot hold is an error, not a wrapped number.
	for _, c := range []struct {
		col Column
		v   Cell
	}{{Column{"t", Uint32, false}, Num(uint64(1) << 32)}, {Column{"t", Uint64, false}, Num(-1)},
		{Column{"l", Int32, false}, Num(int64(1) << 31)}, {Column{"x", Uint64, false}, NA()}} {
		if _, err := parquetValue(&c.v, &c.col); err == nil {
			t.Errorf("%s %v into %v: no error", c.col.Name, c.v.human(), c.col.Type)
		}
	}
}

// Rows stream: they go out in row groups of parquetRowGroupRows, so
// memory holds one group, not a whole export of millions of events.
func TestParquetRowsStreamInRowGroups(t *testing.T) {
	defer func(n int64) { parquetRowGroupRows = n }(parquetRowGroupRows)
	parquetRowGroupRows = 4
	var rows [][]Cell
	for i := range 25 {
		rows = append(rows, []Cell{Num(uint64(i)), Text("fault")})
	}
	path := writeParquet(t, []Column{{"ts_ns", Uint64, false}, {"kind", String, false}}, rows)
	var groups, maxRows, n int64
	err := ducktest.Open(t).QueryRow(fmt.Sprintf(`SELECT count(DISTINCT row_group_id), max(row_group_num_rows), 
		(SELECT count(*) FROM '%[1]s') FROM parquet_metadata('%[1]s')`, path)).Scan(&groups, &maxRows, &n)
	if err != nil {
		t.Fatal(err)
	}
	if n != 25 || groups != 7 || maxRows != 4 {
		t.Errorf("%d rows in %d row groups of at most %d, want 25 in 7 of at most 4", n, groups, maxRows)
	}
}
