// Package storetest builds small stores for the read side's tests: the
// events and timeline marks a test writes, in its order, through the real
// store writer, so that what a reader meets is what ingest would store.
package storetest

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

// Pseudos are the catch-all tensors every store's dictionary begins with.
var Pseudos = []event.Tensor{{ID: event.TensorOther, Name: event.PseudoNames[0], Model: -1, Layer: -1},
	{ID: event.TensorAnon, Name: event.PseudoNames[1], Model: -1, Layer: -1},
	{ID: event.TensorModelMeta, Name: event.PseudoNames[2], Model: -1, Layer: -1}}

// Build writes evs and marks, in order, into a new store of the tensor
// dictionary tensors, in chunks of chunkEvents events (0: the writer's
// default), and opens it; the store is closed when the test ends.
func Build(t testing.TB, tensors []event.Tensor, chunkEvents int, evs []event.Event, marks []event.Mark) *store.Store {
	t.Helper()
	return write(t, tensors, chunkEvents, func(w *store.Writer) {
		for i := range evs {
			if err := w.Event(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		for i := range marks {
			if err := w.Mark(&marks[i]); err != nil {
				t.Fatal(err)
			}
		}
	}, &event.Result{Tensors: tensors, Ops: []string{""}})
}

// FromResult writes a correlated result (its tensor dictionary,
// aggregates, tokens and picks) through the real store writer and opens
// the store; it is closed when the test ends.
func FromResult(t testing.TB, res event.Result) *store.Store {
	t.Helper()
	return write(t, res.Tensors, 0, func(*store.Writer) {}, &res)
}

// WriteResultRun makes dir a finished run directory of res and meta, for
// the read side's commands.
func WriteResultRun(t testing.TB, dir string, res event.Result, meta *rundir.Meta) {
	t.Helper()
	writeIn(t, dir, res.Tensors, 0, func(*store.Writer) {}, &res)
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
}

// WriteEventsRun is WriteResultRun with evs, in time order, as the run's
// events (the events export's rows).
func WriteEventsRun(t testing.TB, dir string, res event.Result, evs []event.Event, meta *rundir.Meta) {
	t.Helper()
	writeIn(t, dir, res.Tensors, 0, func(w *store.Writer) {
		for i := range evs {
			if err := w.Event(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
	}, &res)
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
}

// write creates a store of tensors, lets fill write its events, commits
// res and opens the store.
func write(t testing.TB, tensors []event.Tensor, chunkEvents int, fill func(*store.Writer), res *event.Result) *store.Store {
	t.Helper()
	dir := t.TempDir()
	writeIn(t, dir, tensors, chunkEvents, fill, res)
	return Open(t, dir)
}

func writeIn(t testing.TB, dir string, tensors []event.Tensor, chunkEvents int, fill func(*store.Writer), res *event.Result) {
	t.Helper()
	w := Begin(t, dir, tensors, chunkEvents)
	defer w.Close()
	fill(w)
	if err := w.Commit(res, &store.Summary{}); err != nil {
		t.Fatal(err)
	}
}

// Begin begins a new store in dir, its tensor dictionary tensors, in
// chunks of chunkEvents events (0: the writer's default); the caller
// closes the writer.
func Begin(t testing.TB, dir string, tensors []event.Tensor, chunkEvents int) *store.Writer {
	t.Helper()
	w, err := store.Begin(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Create(tensors, chunkEvents); err != nil {
		w.Close()
		t.Fatal(err)
	}
	return w
}
