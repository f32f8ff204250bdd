package storetest

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
)

// OpenRun opens the run in dir as the read side's commands do
// (store.OpenRun); it is closed when the test ends.
func OpenRun(t testing.TB, dir string) *store.Run {
	t.Helper()
	run, err := store.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return run
}

// Open opens the store of the run in dir; it is closed when the test
// ends.
func Open(t testing.TB, dir string) *store.Store {
	t.Helper()
	st := open(t, dir)
	t.Cleanup(func() { st.Close() })
	return st
}

// open opens the store of the run in dir; the caller closes it.
func open(t testing.TB, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Tokens are the tokens of the run in dir, as `export faults-per-token`
// reads them; the store is closed before it returns.
func Tokens(t testing.TB, dir string) []event.TokenInfo {
	t.Helper()
	st := open(t, dir)
	defer st.Close()
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	return toks
}

// Query runs q on the store of the run in dir, as `iocorr query` does;
// the store is closed before it returns.
func Query(t testing.TB, dir string, q store.Query) []store.Row {
	t.Helper()
	st := open(t, dir)
	defer st.Close()
	rows, err := st.Query(q)
	if err != nil {
		t.Fatalf("query %+v: %v", q, err)
	}
	return rows
}
