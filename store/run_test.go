package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/runtest"
)

// TestOpenRunHoldsTheStoreTheMetadataAndWhatWasNotMeasured: the one
// opener of a run gives what each read command took from its own opening
// before: the store, meta.json as ReadMeta reads it, the snapshots, and
// the NA reasons of the counters and the picks as the metadata says them.
func TestOpenRunHoldsTheStoreTheMetadataAndWhatWasNotMeasured(t *testing.T) {
	dir := runtest.TinyRun(t)
	run, err := store.OpenRun(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if run.Dir != dir || run.Meta.Status() != meta.Status() || len(run.Meta.Models) != len(meta.Models) {
		t.Errorf("run %q, status %q, %d models; want %q, %q, %d", run.Dir, run.Meta.Status(), len(run.Meta.Models), dir, meta.Status(), len(meta.Models))
	}
	if len(run.Store.Tensors) == 0 {
		t.Error("the store has no tensors")
	}
	snaps, err := run.Snapshots()
	want, werr := rundir.ReadSnapshots(dir)
	if err != nil || werr != nil || len(snaps) != len(want) {
		t.Errorf("snapshots: %d (%v), want %d (%v)", len(snaps), err, len(want), werr)
	}
	for name, why := range run.CountersNA() {
		if w := meta.CounterNA(name); w != why {
			t.Errorf("counter %s: NA %q, the metadata says %q", name, why, w)
		}
	}
	if got, want := run.PicksNA(nil), meta.PicksNA(); want != "" && got != want {
		t.Errorf("picks NA %q, the metadata says %q", got, want)
	}
}

func TestOpenRunRefusesADirectoryWithoutAStoreOrMetadata(t *testing.T) {
	noStore := t.TempDir()
	if err := rundir.WriteMeta(noStore, &rundir.Meta{Finished: true}); err != nil {
		t.Fatal(err)
	}
	noMeta := runtest.TinyRun(t)
	if err := os.Remove(filepath.Join(noMeta, rundir.MetaFile)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir string
		want      error
	}{
		{"no store", noStore, store.ErrNoStore},
		{"no meta.json", noMeta, os.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if run, err := store.OpenRun(tc.dir); !errors.Is(err, tc.want) {
				if err == nil {
					run.Close()
				}
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
}
