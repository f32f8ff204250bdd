//go:build !cgo

package ducktest

import (
	"database/sql"
	"testing"
)

// Open fails the test: DuckDB's bindings need cgo. Not a skip, so that a
// test run that lost cgo cannot pass without its reader.
func Open(t testing.TB) *sql.DB {
	t.Helper()
	t.Fatal("DuckDB needs cgo: run the tests with CGO_ENABLED=1 and a C compiler")
	return nil
}
