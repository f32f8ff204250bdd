package index

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/rundir"
)

// ErrNoStore is returned when a run directory has no complete store.
var ErrNoStore = errors.New("no store: run `iocorr ingest` first")

// Store is a read-only view of a built store. Several may be open at once,
// also from different processes.
type Store struct {
	db      *badger.DB
	Summary Summary
	Tensors []correlate.Tensor // by id
	Ops     []string           // by id
}

func readOnlyOptions(path string) badger.Options {
	// No block cache: blocks are not compressed, and skipping the cache's
	// set-up keeps opening (the floor of every query's latency) cheap.
	return badger.DefaultOptions(path).WithLogger(nil).WithReadOnly(true).
		WithBlockCacheSize(0).WithIndexCacheSize(0).WithNumCompactors(0).WithCompression(0)
}

func readSummary(path string) (Summary, error) {
	var s Summary
	if _, err := os.Stat(path); err != nil {
		return s, ErrNoStore
	}
	db, err := badger.Open(readOnlyOptions(path))
	if err != nil {
		return s, fmt.Errorf("opening store: %w", err)
	}
	defer db.Close()
	return s, db.View(func(txn *badger.Txn) error { return getSummary(txn, &s) })
}

func getSummary(txn *badger.Txn, s *Summary) error {
	it, err := txn.Get(summaryKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return ErrNoStore
	}
	if err != nil {
		return fmt.Errorf("reading store summary: %w", err)
	}
	return it.Value(func(v []byte) error {
		if err := json.Unmarshal(v, s); err != nil {
			return fmt.Errorf("store summary: %w", err)
		}
		return nil
	})
}

// Open opens DIR/db read-only and loads its dictionaries.
func Open(dir string) (*Store, error) {
	path := filepath.Join(dir, rundir.DBDir)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoStore)
	}
	db, err := badger.Open(readOnlyOptions(path))
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	s := &Store{db: db}
	err = db.View(func(txn *badger.Txn) error {
		if err := getSummary(txn, &s.Summary); err != nil {
			return err
		}
		if s.Summary.FormatVersion != FormatVersion {
			return fmt.Errorf("store format %d, this iocorr reads %d: run `iocorr ingest --force`", s.Summary.FormatVersion, FormatVersion)
		}
		if err := scan(txn, []byte{pTensor}, func(k, v []byte) error {
			var t correlate.Tensor
			if err := json.Unmarshal(v, &t); err != nil {
				return fmt.Errorf("tensor dictionary: %w", err)
			}
			if int(t.ID) != len(s.Tensors) {
				return fmt.Errorf("tensor dictionary: id %d out of order", t.ID)
			}
			s.Tensors = append(s.Tensors, t)
			return nil
		}); err != nil {
			return err
		}
		return scan(txn, []byte{pOp}, func(k, v []byte) error {
			s.Ops = append(s.Ops, string(v))
			return nil
		})
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the store.
func (s *Store) Close() error { return s.db.Close() }

// scan calls fn for every key with prefix, in key order. k and v are valid
// only during the call.
func scan(txn *badger.Txn, prefix []byte, fn func(k, v []byte) error) error {
	o := badger.DefaultIteratorOptions
	o.Prefix = prefix
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		if err := item.Value(func(v []byte) error { return fn(item.Key(), v) }); err != nil {
			return err
		}
	}
	return nil
}

// OpName names an op id.
func (s *Store) OpName(id uint32) string {
	if int(id) < len(s.Ops) {
		return s.Ops[id]
	}
	return ""
}

// OpOf is the op of an event or aggregate row: the probe's op when
// recorded, else the op of the graph node that consumes the tensor.
func (s *Store) OpOf(op, tensor uint32) uint32 {
	if op == 0 && int(tensor) < len(s.Tensors) {
		return s.Tensors[tensor].Op
	}
	return op
}

// TensorName names a tensor id.
func (s *Store) TensorName(id uint32) string {
	if int(id) < len(s.Tensors) {
		return s.Tensors[id].Name
	}
	return fmt.Sprintf("[tensor %d]", id)
}

// Tokens returns the per-token summaries in token order.
func (s *Store) Tokens() ([]correlate.TokenInfo, error) {
	var out []correlate.TokenInfo
	err := s.db.View(func(txn *badger.Txn) error {
		return scan(txn, []byte{pTokenAgg}, func(k, v []byte) error {
			t, err := parseTokenInfo(k, v)
			if err != nil {
				return err
			}
			out = append(out, t)
			return nil
		})
	})
	return out, err
}

// AggsOfTensor calls fn for the aggregate rows of one tensor, ordered by
// expert, token, op: one range scan.
func (s *Store) AggsOfTensor(tensor uint32, fn func(*correlate.Agg) error) error {
	prefix := u32Key(pAggTensor, tensor)
	var a correlate.Agg
	return s.db.View(func(txn *badger.Txn) error {
		return scan(txn, prefix, func(k, v []byte) error {
			key, err := parseAggTensorKey(k)
			if err != nil {
				return err
			}
			a.AggKey = key
			if err := parseCounters(v, &a.Counters); err != nil {
				return err
			}
			return fn(&a)
		})
	})
}

// Aggs calls fn for every aggregate row, ordered by token, tensor, expert, op.
func (s *Store) Aggs(fn func(*correlate.Agg) error) error {
	var a correlate.Agg
	return s.db.View(func(txn *badger.Txn) error {
		return scan(txn, []byte{pAggToken}, func(k, v []byte) error {
			key, err := parseAggTokenKey(k)
			if err != nil {
				return err
			}
			a.AggKey = key
			if err := parseCounters(v, &a.Counters); err != nil {
				return err
			}
			return fn(&a)
		})
	})
}

// ExpertSelections calls fn for every (token, layer, expert) the router
// picked, with how often.
func (s *Store) ExpertSelections(fn func(correlate.ExpertSel) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		return scan(txn, []byte{pExpertSel}, func(k, v []byte) error {
			if len(k) != 9 || len(v) != 8 {
				return fmt.Errorf("bad expert selection row")
			}
			return fn(correlate.ExpertSel{Token: be.Uint32(k[1:]), Layer: be.Uint16(k[5:]), Expert: be.Uint16(k[7:]), Count: be.Uint64(v)})
		})
	})
}

// EventFilter selects events. Nil Tensors means every tensor.
type EventFilter struct {
	Tensors map[uint32]bool
}

// Events calls fn for every event in chunk (time) order. With a tensor
// filter only the chunks the tensor index names are read.
func (s *Store) Events(f EventFilter, fn func(*correlate.Event) error) error {
	var e correlate.Event
	emitChunk := func(v []byte) error {
		if len(v)%eventLen != 0 {
			return fmt.Errorf("event chunk of %d bytes is not a whole number of events", len(v))
		}
		for off := 0; off < len(v); off += eventLen {
			parseEvent(v[off:], &e)
			if f.Tensors != nil && !f.Tensors[e.Tensor] {
				continue
			}
			if err := fn(&e); err != nil {
				return err
			}
		}
		return nil
	}
	return s.db.View(func(txn *badger.Txn) error {
		if f.Tensors == nil {
			return scan(txn, []byte{pChunk}, func(k, v []byte) error { return emitChunk(v) })
		}
		// Union of the chunks of the selected tensors, in key (time) order.
		chunks := map[string]bool{}
		for t := range f.Tensors {
			if err := scan(txn, u32Key(pIdxTensor, t), func(k, v []byte) error {
				chunks[string(append([]byte{pChunk}, k[5:]...))] = true
				return nil
			}); err != nil {
				return err
			}
		}
		keys := make([][]byte, 0, len(chunks))
		for k := range chunks {
			keys = append(keys, []byte(k))
		}
		sortBytes(keys)
		for _, k := range keys {
			item, err := txn.Get(k)
			if err != nil {
				return fmt.Errorf("event index names a missing chunk: %w", err)
			}
			if err := item.Value(emitChunk); err != nil {
				return err
			}
		}
		return nil
	})
}

func sortBytes(ks [][]byte) {
	slices.SortFunc(ks, bytes.Compare)
}
