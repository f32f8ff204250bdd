package index

import (
	"encoding/json"
	"path/filepath"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

// What the external tests (package index_test, which build stores through
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
