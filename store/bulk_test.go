package store_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// dumpStore is every key and value of DIR's store but its summary.
func dumpStore(t *testing.T, dir string) (keys, vals [][]byte) {
	t.Helper()
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.EachKey(func(k, v []byte) error {
		keys, vals = append(keys, k), append(vals, v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys, vals
}

// The build holds a bounded part of the store and spills the rest in
// sorted runs: a store built through many spilled, merged runs holds
// exactly the keys and values of one built in memory.
func TestAStoreBuiltThroughSpilledRunsEqualsOneBuiltInMemory(t *testing.T) {
	dir := t.TempDir()
	storetest.WriteSynthRun(t, dir, 60_000, 50, storetest.SmallShape)
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{ChunkEvents: 256}); err != nil {
		t.Fatal(err)
	}
	wantK, wantV := dumpStore(t, dir)

	// ~200 runs of 16 KiB: more than one merge level (extsort.FanIn).
	defer store.SetKVBytesInMemory(16 << 10)()
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{Force: true, ChunkEvents: 256}); err != nil {
		t.Fatal(err)
	}
	gotK, gotV := dumpStore(t, dir)
	if len(gotK) != len(wantK) {
		t.Fatalf("spilled build stored %d keys, in-memory build %d", len(gotK), len(wantK))
	}
	for i := range wantK {
		if !bytes.Equal(gotK[i], wantK[i]) || !bytes.Equal(gotV[i], wantV[i]) {
			t.Fatalf("key %d: spilled build %x = %d bytes, in-memory build %x = %d bytes", i, gotK[i], len(gotV[i]), wantK[i], len(wantV[i]))
		}
	}
	if len(wantK) < 1000 {
		t.Fatalf("only %d keys: the test builds too small a store to spill", len(wantK))
	}
}

// A key put twice would make badger's StreamWriter panic in a goroutine
// of its own; the build says so as an error and leaves no store.
func TestAKeyPutTwiceIsAnErrorAndLeavesNoStore(t *testing.T) {
	dir := t.TempDir()
	storetest.WriteSynthRun(t, dir, 1000, 4, storetest.SmallShape)
	w := storetest.Begin(t, dir, nil, 0)
	defer w.Close()
	for range 2 {
		if err := w.PutKey([]byte{0x7f, 1}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	err := w.Commit(&event.Result{}, &store.Summary{})
	if err == nil || !strings.Contains(err.Error(), "put twice") {
		t.Fatalf("commit of a key put twice: %v, want an error naming it", err)
	}
	if _, err := store.Open(dir); err == nil {
		t.Fatal("a failed build left a store readers open")
	}
}
