package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

// ErrNoStore is returned when a run directory has no complete store.
var ErrNoStore = errors.New("no store: run `iocorr ingest` first")

// Store is a read-only view of a built store. Several may be open at once,
// also from different processes.
type Store struct {
	db      *badger.DB
	rel     *releaser // drops the store's mapped pages as scans read them
	Summary Summary
	Tensors []event.Tensor // by id
	Ops     []string       // by id
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
	return it.Value(func(v []byte) error { return parseSummary(v, s) })
}

// CheckRunDir says, in one line, when dir is no run directory.
func CheckRunDir(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, rundir.MetaFile)); err != nil {
		return fmt.Errorf("%s is not a run directory (no %s)", dir, rundir.MetaFile)
	}
	return nil
}

// formatError is the one-line answer to a store of another format.
func formatError(dir string, got int) error {
	rel := "older"
	if got > FormatVersion {
		rel = "newer"
	}
	return fmt.Errorf("store format %d is %s than this iocorr's %d: re-run iocorr ingest --force %s", got, rel, FormatVersion, dir)
}

// Open opens DIR/db read-only and loads its dictionaries.
func Open(dir string) (*Store, error) {
	path := filepath.Join(dir, rundir.DBDir)
	if _, err := os.Stat(path); err != nil {
		if err := CheckRunDir(dir); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", dir, ErrNoStore)
	}
	db, err := badger.Open(readOnlyOptions(path))
	if err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	s := &Store{db: db, rel: newReleaser(path)}
	err = db.View(func(txn *badger.Txn) error {
		if err := getSummary(txn, &s.Summary); err != nil {
			return err
		}
		if s.Summary.FormatVersion != FormatVersion {
			return formatError(dir, s.Summary.FormatVersion)
		}
		if err := scan(txn, tensorTable, nil, func(k, v []byte) error {
			t, err := parseTensor(k, v)
			if err != nil {
				return err
			}
			if int(t.ID) != len(s.Tensors) {
				return fmt.Errorf("tensor dictionary: id %d out of order", t.ID)
			}
			s.Tensors = append(s.Tensors, t)
			return nil
		}); err != nil {
			return err
		}
		return scan(txn, opTable, nil, func(k, v []byte) error {
			id, name, err := parseOp(k, v)
			if err != nil {
				return err
			}
			if int(id) != len(s.Ops) {
				return fmt.Errorf("op dictionary: id %d out of order", id)
			}
			s.Ops = append(s.Ops, name)
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

// scan calls fn for every key with prefix, in key order, counting what it
// reads in rel (nil: no release). k and v are valid only during the call.
func scan(txn *badger.Txn, prefix []byte, rel *releaser, fn func(k, v []byte) error) error {
	return scanFrom(txn, prefix, prefix, rel, fn)
}

// errStopScan, returned by a scan's fn, ends the scan without an error.
var errStopScan = errors.New("stop the scan")

// scanFrom is scan from the first key at or after from.
func scanFrom(txn *badger.Txn, prefix, from []byte, rel *releaser, fn func(k, v []byte) error) error {
	o := badger.DefaultIteratorOptions
	o.Prefix = prefix
	o.PrefetchValues = false
	it := txn.NewIterator(o)
	defer it.Close()
	for it.Seek(from); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		if err := item.Value(func(v []byte) error {
			rel.read(len(item.Key()) + len(v))
			return fn(item.Key(), v)
		}); err != nil {
			if errors.Is(err, errStopScan) {
				return nil
			}
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

// Tensor is the dictionary row of a tensor id; an id the dictionary does
// not have (a damaged store) gets a row naming it, not a panic.
func (s *Store) Tensor(id uint32) *event.Tensor {
	if int(id) < len(s.Tensors) {
		return &s.Tensors[id]
	}
	return &event.Tensor{ID: id, Name: fmt.Sprintf("[tensor %d]", id), Model: -1, Layer: -1}
}

// TensorName names a tensor id.
func (s *Store) TensorName(id uint32) string {
	if int(id) < len(s.Tensors) {
		return s.Tensors[id].Name
	}
	return fmt.Sprintf("[tensor %d]", id)
}

// Tokens returns the per-token summaries in token order.
func (s *Store) Tokens() ([]event.TokenInfo, error) {
	var out []event.TokenInfo
	err := s.EachToken(func(t *event.TokenInfo) error {
		out = append(out, *t)
		return nil
	})
	return out, err
}

// EachToken calls fn for every per-token summary in token order, streaming.
func (s *Store) EachToken(fn func(*event.TokenInfo) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		return scan(txn, tokenTable, s.rel, func(k, v []byte) error {
			t, err := parseTokenInfo(k, v)
			if err != nil {
				return err
			}
			return fn(&t)
		})
	})
}

// aggScan calls fn for every aggregate row under prefix, parsing keys with
// parse. The *Agg is reused between calls.
func (s *Store) aggScan(prefix []byte, parse func([]byte) (event.AggKey, error), fn func(*event.Agg) error) error {
	return s.aggScanFrom(prefix, prefix, parse, fn)
}

// aggScanFrom is aggScan from the first key at or after from.
func (s *Store) aggScanFrom(prefix, from []byte, parse func([]byte) (event.AggKey, error), fn func(*event.Agg) error) error {
	var a event.Agg
	return scanRowsFrom(s, prefix, from, func(k, v []byte) (*event.Agg, error) {
		key, err := parse(k)
		if err != nil {
			return nil, err
		}
		a.AggKey = key
		return &a, parseCounters(v, &a.Counters)
	}, fn)
}

// AggsOfTensor calls fn for the finest aggregate rows of one tensor
// (token × expert × op), ordered by expert, token, op: one range scan.
func (s *Store) AggsOfTensor(tensor uint32, fn func(*event.Agg) error) error {
	return s.aggScan(aggTensorPrefix(tensor), parseAggTensorKey, fn)
}

// allFineAggs calls fn for every finest row, ordered by tensor, expert, token, op.
func (s *Store) allFineAggs(fn func(*event.Agg) error) error {
	return s.aggScan(aggTensorTable, parseAggTensorKey, fn)
}

// TensorTokenAggs calls fn for one tensor's rows per token, experts and
// ops folded (Expert -1, Op 0), in token order: the rows behind
// `query --tensor`.
func (s *Store) TensorTokenAggs(tensor uint32, fn func(*event.Agg) error) error {
	return s.aggScan(aggTTPrefix(tensor), parseAggTTKey, fn)
}

func (s *Store) allTensorTokenAggs(fn func(*event.Agg) error) error {
	return s.aggScan(aggTTTable, parseAggTTKey, fn)
}

// Aggs calls fn for every (token, tensor, expert) row, ops folded (Op 0),
// ordered by token, tensor, expert: the rows of
// `export faults-per-token-tensor`.
func (s *Store) Aggs(fn func(*event.Agg) error) error {
	return s.aggScan(aggTokenTable, parseAggTokenKey, fn)
}

// tokenRangeAggs calls fn for the (token, tensor, expert) rows, ops folded,
// of tokens lo to hi: one range scan of the rows in token order.
func (s *Store) tokenRangeAggs(lo, hi uint32, fn func(*event.Agg) error) error {
	return s.aggScanFrom(aggTokenTable, aggTokenPrefix(lo), parseAggTokenKey, func(a *event.Agg) error {
		if a.Token > hi {
			return errStopScan
		}
		return fn(a)
	})
}

// phaseAggScan calls fn for every row of the run's totals by phase under
// prefix (of the totals by tensor, expert and op, or by tensor; the table
// or one tensor's rows), parsing keys with parse, as a row of token 0
// with its phase; the *Agg is reused between calls.
func (s *Store) phaseAggScan(prefix []byte, parse func([]byte) (phaseAggKey, error), fn func(a *event.Agg, phase uint8) error) error {
	var a event.Agg
	return scanRows(s, prefix, func(k, v []byte) (uint8, error) {
		key, err := parse(k)
		if err != nil {
			return 0, err
		}
		a.AggKey = event.AggKey{Tensor: key.Tensor, Expert: key.Expert, Op: key.Op}
		return key.Phase, parseCounters(v, &a.Counters)
	}, func(phase uint8) error { return fn(&a, phase) })
}

// phasePicks calls fn for every (phase, layer, expert) the router picked,
// with how often in the tokens of that phase.
func (s *Store) phasePicks(fn func(phasePick) error) error {
	return scanRows(s, selPhaseTable, parsePhasePick, fn)
}

// ExpertSelections calls fn for every (token, layer, expert) the router
// picked, with how often.
func (s *Store) ExpertSelections(fn func(event.ExpertSel) error) error {
	return scanRows(s, expertSelTable, parseExpertSel, fn)
}

// tokenRangeSelections is ExpertSelections of tokens lo to hi: one range
// scan of the picks in token order.
func (s *Store) tokenRangeSelections(lo, hi uint32, fn func(event.ExpertSel) error) error {
	return scanRowsFrom(s, expertSelTable, expertSelPrefix(lo), parseExpertSel, func(e event.ExpertSel) error {
		if e.Token > hi {
			return errStopScan
		}
		return fn(e)
	})
}

// scanRows calls fn with every row of table, parsed by parse.
func scanRows[T any](s *Store, table []byte, parse func(k, v []byte) (T, error), fn func(T) error) error {
	return scanRowsFrom(s, table, table, parse, fn)
}

// scanRowsFrom is scanRows from the first key at or after from.
func scanRowsFrom[T any](s *Store, table, from []byte, parse func(k, v []byte) (T, error), fn func(T) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		return scanFrom(txn, table, from, s.rel, func(k, v []byte) error {
			row, err := parse(k, v)
			if err != nil {
				return err
			}
			return fn(row)
		})
	})
}

// EventFilter selects events; a nil field selects everything. Events reads
// the chunks named by the most selective index given (tensor, token, op,
// expert, then layer) and checks every field on each event.
type EventFilter struct {
	Tensors map[uint32]bool
	Tokens  *[2]uint32      // inclusive range
	Ops     map[uint32]bool // op ids as stored (probe ops; see Store.OpOf)
	Experts map[int16]bool
	Layers  map[int]bool
}

func (f *EventFilter) match(s *Store, e *event.Event) bool {
	if f.Tensors != nil && !f.Tensors[e.Tensor] {
		return false
	}
	if f.Tokens != nil && (e.Token < f.Tokens[0] || e.Token > f.Tokens[1]) {
		return false
	}
	if f.Ops != nil && !f.Ops[s.OpOf(e.Op, e.Tensor)] {
		return false
	}
	if f.Experts != nil && !f.Experts[e.Expert] {
		return false
	}
	if f.Layers != nil {
		if int(e.Tensor) >= len(s.Tensors) || !f.Layers[s.Tensors[e.Tensor].Layer] {
			return false
		}
	}
	return true
}

// chunkIndexScans are the index prefixes whose chunks hold the filter's
// events, nil to read every chunk.
func (f *EventFilter) chunkIndexScans(s *Store) [][]byte {
	var ps [][]byte
	switch {
	case f.Tensors != nil:
		for t := range f.Tensors {
			ps = append(ps, ixTensor.valuePrefix(t))
		}
	case f.Tokens != nil && uint64(f.Tokens[1])-uint64(f.Tokens[0]) < 1<<16:
		for t := uint64(f.Tokens[0]); t <= uint64(f.Tokens[1]); t++ {
			ps = append(ps, ixToken.valuePrefix(uint32(t)))
		}
	case f.Ops != nil:
		// An event's op is its probe op, or when it has none (op probes
		// off, or a thread that ran no probed op) the op of the graph node
		// reading its tensor: chunks of either kind may hold it.
		ps = [][]byte{}
		if s.Summary.OpProbes {
			for op := range f.Ops {
				ps = append(ps, ixOp.valuePrefix(op))
			}
		}
		for i := range s.Tensors {
			if f.Ops[s.Tensors[i].Op] {
				ps = append(ps, ixTensor.valuePrefix(s.Tensors[i].ID))
			}
		}
	case f.Experts != nil:
		for e := range f.Experts {
			ps = append(ps, ixExpert.valuePrefix(expertIndexValue(e)))
		}
	case f.Layers != nil:
		for l := range f.Layers {
			ps = append(ps, ixLayer.valuePrefix(layerIndexValue(l)))
		}
	}
	return ps
}

// Events calls fn for every event that f selects, in chunk (time) order.
// With a filter only the chunks its most selective index names are read.
func (s *Store) Events(f EventFilter, fn func(*event.Event) error) error {
	var e event.Event
	emitChunk := func(v []byte) error {
		r, err := newChunkReader(v)
		if err != nil {
			return err
		}
		for r.next(&e) {
			if !f.match(s, &e) {
				continue
			}
			if err := fn(&e); err != nil {
				return err
			}
		}
		return r.err
	}
	return s.db.View(func(txn *badger.Txn) error {
		scans := f.chunkIndexScans(s)
		if scans == nil {
			return scan(txn, chunkTable, s.rel, func(k, v []byte) error { return emitChunk(v) })
		}
		// Union of the chunks the index names, in key (time) order.
		chunks := map[string]bool{}
		for _, p := range scans {
			if err := scan(txn, p, s.rel, func(k, v []byte) error {
				_, _, chunk, err := parseChunkIndexKey(k)
				chunks[string(chunk)] = true
				return err
			}); err != nil {
				return err
			}
		}
		keys := make([][]byte, 0, len(chunks))
		for k := range chunks {
			keys = append(keys, []byte(k))
		}
		slices.SortFunc(keys, bytes.Compare)
		for _, k := range keys {
			item, err := txn.Get(k)
			if err != nil {
				return fmt.Errorf("event index names a missing chunk: %w", err)
			}
			if err := item.Value(func(v []byte) error {
				s.rel.read(len(v))
				return emitChunk(v)
			}); err != nil {
				return err
			}
		}
		return nil
	})
}

// Records calls fn once per raw record that f selects, with the slices the
// correlator split it into: the events of one request id that follow one
// another in store order (a block request's or a read call's per-tensor
// slices, a folio's, a fault alone). It is the one place readers put a
// request back together. An event without a request id (0, made by hand)
// is a record of its own. rec is valid only during the call.
func (s *Store) Records(f EventFilter, fn func(rec []event.Event) error) error {
	var rec []event.Event
	err := s.Events(f, func(e *event.Event) error {
		if len(rec) > 0 && (e.Req == 0 || e.Req != rec[0].Req) {
			if err := fn(rec); err != nil {
				return err
			}
			rec = rec[:0]
		}
		rec = append(rec, *e)
		return nil
	})
	if err == nil && len(rec) > 0 {
		err = fn(rec)
	}
	return err
}

// Marks calls fn for every timeline mark of the run, in spool order.
func (s *Store) Marks(fn func(*event.Mark) error) error {
	return s.db.View(func(txn *badger.Txn) error {
		return scan(txn, markTable, s.rel, func(k, v []byte) error {
			if _, err := parseMarkChunkKey(k); err != nil {
				return err
			}
			return parseMarkChunk(v, fn)
		})
	})
}
