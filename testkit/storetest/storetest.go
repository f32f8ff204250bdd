// Package storetest builds small stores for the read side's tests: the
// events and timeline marks a test writes, in its order, through the real
// index writer, so that what a reader meets is what ingest would store.
package storetest

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/index"
)

// Build writes evs and marks, in order, into a new store of the tensor
// dictionary tensors, in chunks of chunkEvents events (0: the writer's
// default), and opens it; the store is closed when the test ends.
func Build(t testing.TB, tensors []event.Tensor, chunkEvents int, evs []event.Event, marks []event.Mark) *index.Store {
	t.Helper()
	dir := t.TempDir()
	w, err := index.Begin(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Create(tensors, chunkEvents); err != nil {
		t.Fatal(err)
	}
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
	if err := w.Commit(&event.Result{Tensors: tensors, Ops: []string{""}}, &index.Summary{}); err != nil {
		t.Fatal(err)
	}
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// FromResult writes a correlated result (its tensor dictionary,
// aggregates, tokens and picks) through the real index writer and opens
// the store; it is closed when the test ends.
func FromResult(t testing.TB, res event.Result) *index.Store {
	t.Helper()
	dir := t.TempDir()
	w, err := index.Begin(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Create(res.Tensors, 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(&res, &index.Summary{}); err != nil {
		t.Fatal(err)
	}
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
