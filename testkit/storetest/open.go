package storetest

import (
	"testing"

	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

// OpenRun opens the run in dir as the read side's commands do
// (index.OpenRun) and gives its store and metadata; the store is closed
// when the test ends.
func OpenRun(t testing.TB, dir string) (*index.Store, *rundir.Meta) {
	t.Helper()
	run, err := index.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { run.Close() })
	return run.Store, run.Meta
}
