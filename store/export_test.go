package store

import (
	"encoding/json"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

// What the external tests (package store_test, which build stores through
// package pipeline) need of the inside.

var LockBuild = lockBuild

func (f *EventFilter) Match(s *Store, e *event.Event) bool { return f.match(s, e) }

// RewriteFormatVersion makes DIR/db look written by a store format v.
func RewriteFormatVersion(dir string, v int) error {
	db, err := badger.Open(bulkOptions(filepath.Join(dir, rundir.DBDir)))
	if err != nil {
		return err
	}
	defer db.Close()
	var s Summary
	if err := db.View(func(txn *badger.Txn) error { return getSummary(txn, &s) }); err != nil {
		return err
	}
	s.FormatVersion = v
	b, err := json.Marshal(&s)
	if err != nil {
		return err
	}
	return db.Update(func(txn *badger.Txn) error { return txn.Set(summaryKey, b) })
}

// SetKVBytesInMemory sets the build's in-memory bound until the returned
// function restores it.
func SetKVBytesInMemory(n int) (restore func()) {
	old := kvBytesInMemory
	kvBytesInMemory = n
	return func() { kvBytesInMemory = old }
}

// EachKey calls fn with every key and value of the store but the summary
// (which holds the build's time), in key order.
func (s *Store) EachKey(fn func(k, v []byte) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.DefaultIteratorOptions)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if string(it.Item().Key()) == string(summaryKey) {
				continue
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := fn(it.Item().KeyCopy(nil), v); err != nil {
				return err
			}
		}
		return nil
	})
}

// PutKey puts one more key into a build, as its writers do.
func (w *Writer) PutKey(k, v []byte) error { return w.put(k, v) }
