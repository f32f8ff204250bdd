package ducktest

import (
	"database/sql"
	"testing"
)

// Row is the row rows is at, n columns, as database/sql gives them (nil
// for NULL): a reader's cells before any conversion of the test's own.
func Row(t testing.TB, rows *sql.Rows, n int) []any {
	t.Helper()
	vals := make([]any, n)
	ptrs := make([]any, n)
	for k := range vals {
		ptrs[k] = &vals[k]
	}
	if err := rows.Scan(ptrs...); err != nil {
		t.Fatal(err)
	}
	return vals
}

// All runs q and gives its columns and every row's cells (Row's), failing
// the test on an error of the query or of its rows.
func All(t testing.TB, db *sql.DB, q string) (cols []string, rows [][]any) {
	t.Helper()
	rs, err := db.Query(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	defer rs.Close()
	if cols, err = rs.Columns(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	for rs.Next() {
		rows = append(rows, Row(t, rs, len(cols)))
	}
	if err := rs.Err(); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return cols, rows
}
