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
