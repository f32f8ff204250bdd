//go:build cgo

// Package ducktest opens DuckDB for tests: a reader of the exports
// independent of the writer (parquet-go), as a study would read them.
// Only tests import it, so the iocorr binary carries no DuckDB. DuckDB's
// Go bindings are cgo: without cgo (a cross build's vet) the package
// still compiles, and a test that asks for DuckDB fails (ducktest_nocgo.go).
package ducktest

import (
	"database/sql"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"
)

// Open opens an in-memory DuckDB, closed when the test ends.
func Open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
