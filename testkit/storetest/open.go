package storetest

import (
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

// OpenRun opens the run in dir as the read side's commands do
// (store.OpenRun) and gives its store and metadata; the store is closed
// when the test ends.
func OpenRun(t testing.TB, dir string) (*store.Store, *rundir.Meta) {
	t.Helper()
	run, err := store.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return run.Store, run.Meta
}
