package store

import (
	"os"
	"runtime/debug"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

// HeapLimit is the Go heap the read side aims under while a run is open,
// and ingest while it builds a store (BoundHeap): they stream, and what it holds is bounded, but the collector lets
// garbage reach the live heap's size again before it runs; near this
// limit it runs sooner. It is a soft limit: a figure that needs more gets
// it. GOMEMLIMIT, when set, wins.
const HeapLimit = 160 << 20

// Run is a recorded run as the read side reads it, opened once from its
// directory (OpenRun): its store, its metadata, its residency snapshots
// and why what it did not measure is NA. Every command that reads a run
// takes one, as perf's read commands take one perf session.
type Run struct {
	Dir   string
	Store *Store
	Meta  *rundir.Meta

	// snaps are read at the first call of Snapshots (read); a run is
	// read by one goroutine.
	snaps    []rundir.Snapshot
	snapsErr error
	read     bool
}

// BoundHeap sets HeapLimit, unless GOMEMLIMIT is set.
func BoundHeap() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(HeapLimit)
	}
}

// OpenRun opens the run in dir: its store and its metadata, under
// HeapLimit (BoundHeap). Close closes it.
func OpenRun(dir string) (*Run, error) {
	BoundHeap()
	st, err := Open(dir)
	if err != nil {
		return nil, err
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		st.Close()
		return nil, err
	}
	return &Run{Dir: dir, Store: st, Meta: meta}, nil
}

// Close closes the run's store.
func (r *Run) Close() error { return r.Store.Close() }

// Snapshots are the run's residency snapshots, read at the first call: a
// run of the default tier takes its residency from them.
func (r *Run) Snapshots() ([]rundir.Snapshot, error) {
	if !r.read {
		r.snaps, r.snapsErr = rundir.ReadSnapshots(r.Dir)
		r.read = true
	}
	return r.snaps, r.snapsErr
}

// CountersNA maps each counter (event.CounterFields) the run did not
// measure to why.
func (r *Run) CountersNA() map[string]string {
	names := make([]string, len(event.CounterFields))
	for i := range event.CounterFields {
		names[i] = event.CounterFields[i].Name
	}
	return r.Meta.CountersNA(names)
}

// PicksNA says why the router's picks a query selects (nil: all) are NA:
// the run's reason when it did not probe them, else the store's when some
// of them were not seen; "" when every one was.
func (r *Run) PicksNA(q *Query) string {
	if why := r.Meta.PicksNA(); why != "" {
		return why
	}
	return r.Store.Summary.PicksNAOf(q)
}
