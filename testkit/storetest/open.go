package storetest

import (
	"testing"

	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

// OpenRun opens the store and reads the metadata of the run in dir, as
// the read side's commands do; the store is closed when the test ends.
func OpenRun(t testing.TB, dir string) (*index.Store, *rundir.Meta) {
	t.Helper()
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st, meta
}
