package index

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
)

// Options tune Build.
type Options struct {
	// Force rebuilds a store that is already complete for this spool.
	Force bool
	// ChunkEvents is the number of events per stored chunk (default 4096).
	ChunkEvents int
}

// Summary describes a built store; it is stored in the store as its last
// key, so its presence means the build finished.
type Summary struct {
	FormatVersion int               `json:"format_version"`
	SpoolSize     int64             `json:"spool_size"`
	SpoolModNS    int64             `json:"spool_mod_ns"`
	Records       uint64            `json:"records"`
	ByType        map[string]uint64 `json:"records_by_type"`
	Short         uint64            `json:"short_records"`
	Unknown       uint64            `json:"unknown_records"`
	BadFrames     uint64            `json:"bad_frames"`
	TornTail      uint64            `json:"torn_tail_bytes"`
	Lost          map[string]uint64 `json:"lost,omitempty"`
	Events        uint64            `json:"events"`
	Chunks        uint64            `json:"chunks"`
	Tokens        int               `json:"tokens"`
	Tensors       int               `json:"tensors"`
	AggRows       int               `json:"aggregate_rows"`
	OpProbes      bool              `json:"op_probes"`
	NotFileBacked []string          `json:"not_file_backed,omitempty"`
	PendingCapped uint64            `json:"readahead_windows_capped,omitempty"`
	BuildNS       int64             `json:"build_ns"`
	// AlreadyBuilt is set (not stored) when Build found a complete store.
	AlreadyBuilt bool `json:"-"`
}

// RecordsPerSecond is the ingest rate of the build.
func (s *Summary) RecordsPerSecond() float64 {
	if s.BuildNS <= 0 {
		return 0
	}
	return float64(s.Records) / (float64(s.BuildNS) / 1e9)
}

// bulkOptions are badger options for a one-shot bulk build: nobody reads
// while it is written and a crash restarts it from the spool, so writes
// are not synced, conflicts are not tracked, one version is kept, and
// values are not compressed (chunks are written once, read rarely, and
// compression cost more than it saved on the 2-CPU target).
func bulkOptions(path string) badger.Options {
	return badger.DefaultOptions(path).
		WithLogger(nil).
		WithSyncWrites(false).
		WithDetectConflicts(false).
		WithNumVersionsToKeep(1).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithMemTableSize(64 << 20).
		WithNumCompactors(2).
		WithValueThreshold(4096)
}

// Build ingests DIR's spool into DIR/db. It is idempotent: a complete store
// for the same spool (size and mtime) is left alone unless opts.Force. It
// is crash-safe: the store is built in DIR/db.tmp, which a new Build
// discards, and renamed to DIR/db only when complete, so DIR/db is either
// absent, the previous store, or the new one, never half written.
func Build(ctx context.Context, dir string, opts Options) (Summary, error) {
	if opts.ChunkEvents <= 0 {
		opts.ChunkEvents = 4096
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		return Summary{}, err
	}
	spoolPath := filepath.Join(dir, rundir.SpoolFile)
	fi, err := os.Stat(spoolPath)
	if err != nil {
		return Summary{}, fmt.Errorf("run has no spool: %w", err)
	}
	final := filepath.Join(dir, rundir.DBDir)
	if !opts.Force {
		if s, err := readSummary(final); err == nil && s.FormatVersion == FormatVersion &&
			s.SpoolSize == fi.Size() && s.SpoolModNS == fi.ModTime().UnixNano() {
			s.AlreadyBuilt = true
			return s, nil
		}
	}
	tmp := final + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return Summary{}, fmt.Errorf("removing an unfinished store: %w", err)
	}
	start := time.Now()
	sum, err := buildInto(ctx, tmp, spoolPath, meta, opts)
	if err != nil {
		os.RemoveAll(tmp)
		return Summary{}, err
	}
	sum.SpoolSize, sum.SpoolModNS = fi.Size(), fi.ModTime().UnixNano()
	sum.BuildNS = time.Since(start).Nanoseconds()
	// The summary goes in last, after everything else is flushed and the
	// db closed: a store without it is unfinished.
	if err := writeSummary(tmp, &sum); err != nil {
		os.RemoveAll(tmp)
		return Summary{}, err
	}
	old := final + ".old"
	os.RemoveAll(old)
	if err := os.Rename(final, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return Summary{}, fmt.Errorf("replacing the store: %w", err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return Summary{}, fmt.Errorf("installing the store: %w", err)
	}
	os.RemoveAll(old)
	return sum, nil
}

func writeSummary(path string, s *Summary) error {
	// One small key: a small memtable keeps this second open cheap.
	db, err := badger.Open(bulkOptions(path).WithMemTableSize(1 << 20))
	if err != nil {
		return fmt.Errorf("opening store: %w", err)
	}
	b, _ := json.Marshal(s)
	err = db.Update(func(txn *badger.Txn) error { return txn.Set(summaryKey, b) })
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing store summary: %w", err)
	}
	return nil
}

// chunker is the correlator's sink: it packs events into chunks of
// ChunkEvents and writes each with its secondary index keys.
type chunker struct {
	wb     *badger.WriteBatch
	tensor []correlate.Tensor
	buf    []correlate.Event
	size   int
	seq    uint32
	val    []byte
	key    []byte
	seen   map[uint64]struct{} // index keys of this chunk already written
	chunks uint64
}

func (c *chunker) Event(e *correlate.Event) error {
	c.buf = append(c.buf, *e)
	if len(c.buf) >= c.size {
		return c.flush()
	}
	return nil
}

func (c *chunker) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	// Held-back page adds arrive a little late: order the chunk by time.
	slices.SortStableFunc(c.buf, func(a, b correlate.Event) int {
		switch {
		case a.Ts < b.Ts:
			return -1
		case a.Ts > b.Ts:
			return 1
		}
		return 0
	})
	c.seq++
	ck := chunkKey(c.buf[0].Ts, c.seq)
	val := make([]byte, 0, len(c.buf)*eventLen) // WriteBatch keeps it until the commit
	for i := range c.buf {
		val = appendEvent(val, &c.buf[i])
	}
	if err := c.wb.Set(ck, val); err != nil {
		return fmt.Errorf("writing events: %w", err)
	}
	suffix := ck[1:]
	clear(c.seen)
	for i := range c.buf {
		e := &c.buf[i]
		layer := uint64(0)
		if int(e.Tensor) < len(c.tensor) {
			layer = uint64(c.tensor[e.Tensor].Layer + 1)
		}
		for _, ix := range [...]struct {
			p     byte
			v     uint64
			width int
		}{{pIdxTensor, uint64(e.Tensor), 4}, {pIdxLayer, layer, 2}, {pIdxExpert, uint64(uint16(e.Expert + 1)), 2}, {pIdxToken, uint64(e.Token), 4}, {pIdxOp, uint64(e.Op), 4}} {
			h := uint64(ix.p)<<56 | ix.v
			if _, ok := c.seen[h]; ok {
				continue
			}
			c.seen[h] = struct{}{}
			if err := c.wb.Set(idxKey(nil, ix.p, ix.v, ix.width, suffix), nil); err != nil {
				return fmt.Errorf("writing event index: %w", err)
			}
		}
	}
	c.chunks++
	c.buf = c.buf[:0]
	return nil
}

func buildInto(ctx context.Context, path, spoolPath string, meta *rundir.Meta, opts Options) (Summary, error) {
	sp, err := ingest.OpenSpool(spoolPath)
	if err != nil {
		return Summary{}, err
	}
	defer sp.Close()
	db, err := badger.Open(bulkOptions(path))
	if err != nil {
		return Summary{}, fmt.Errorf("creating store: %w", err)
	}
	sum, err := ingestAll(ctx, db, sp, meta, opts)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("closing store: %w", cerr)
	}
	return sum, err
}

func ingestAll(ctx context.Context, db *badger.DB, sp *ingest.SpoolReader, meta *rundir.Meta, opts Options) (Summary, error) {
	wb := db.NewWriteBatch()
	defer wb.Cancel()
	ch := &chunker{wb: wb, size: opts.ChunkEvents, buf: make([]correlate.Event, 0, opts.ChunkEvents), seen: map[uint64]struct{}{}}
	cor, err := correlate.New(meta, ch)
	if err != nil {
		return Summary{}, fmt.Errorf("run metadata: %w", err)
	}
	// The chunker needs layers for its index; the correlator's table is
	// complete from the start (pseudo tensors, then the models').
	ch.tensor = cor.Tensors()
	var ds ingest.DecodeStats
	for n := 0; ; n++ {
		if n&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return Summary{}, err
			}
		}
		rec, err := sp.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Summary{}, err
		}
		r, ok := ingest.Decode(rec, &ds)
		if !ok {
			continue
		}
		if err := cor.Add(r); err != nil {
			return Summary{}, err
		}
	}
	res, err := cor.Finish()
	if err != nil {
		return Summary{}, err
	}
	if err := ch.flush(); err != nil {
		return Summary{}, err
	}
	if err := writeResult(wb, res); err != nil {
		return Summary{}, err
	}
	if err := wb.Flush(); err != nil {
		return Summary{}, fmt.Errorf("writing store: %w", err)
	}
	st := sp.Stats()
	sum := Summary{
		FormatVersion: FormatVersion,
		Records:       st.Records,
		ByType:        map[string]uint64{},
		Short:         ds.Short,
		Unknown:       ds.Unknown,
		BadFrames:     st.BadFrames,
		TornTail:      st.TornTail,
		Lost:          meta.Lost,
		Events:        res.Stats.Events,
		Chunks:        ch.chunks,
		Tokens:        len(res.Tokens),
		Tensors:       len(res.Tensors),
		AggRows:       len(res.Aggs),
		OpProbes:      res.OpProbes,
		NotFileBacked: res.NotBacked,
		PendingCapped: res.Stats.PendingCapped,
	}
	for t, n := range ds.ByType {
		if n > 0 {
			sum.ByType[bpf.EventTypeName(uint32(t))] = n
		}
	}
	return sum, nil
}

// writeResult writes the dictionaries and the per-run aggregates.
func writeResult(wb *badger.WriteBatch, res *correlate.Result) error {
	set := func(k, v []byte) error {
		if err := wb.Set(k, v); err != nil {
			return fmt.Errorf("writing aggregates: %w", err)
		}
		return nil
	}
	for i := range res.Tensors {
		v, err := tensorValue(&res.Tensors[i])
		if err != nil {
			return err
		}
		if err := set(u32Key(pTensor, res.Tensors[i].ID), v); err != nil {
			return err
		}
	}
	for id, name := range res.Ops {
		if err := set(u32Key(pOp, uint32(id)), []byte(name)); err != nil {
			return err
		}
	}
	for i := range res.Tokens {
		t := &res.Tokens[i]
		if err := set(u32Key(pTokenAgg, t.Token), appendTokenInfo(nil, t)); err != nil {
			return err
		}
	}
	for i := range res.Aggs {
		a := &res.Aggs[i]
		v := appendCounters(make([]byte, 0, countersLen), &a.Counters)
		if err := set(aggTensorKey(a.AggKey), v); err != nil {
			return err
		}
		if err := set(aggTokenKey(a.AggKey), v); err != nil {
			return err
		}
	}
	for _, e := range res.Experts {
		k := be.AppendUint32([]byte{pExpertSel}, e.Token)
		k = be.AppendUint16(k, e.Layer)
		k = be.AppendUint16(k, e.Expert)
		if err := set(k, be.AppendUint64(nil, e.Count)); err != nil {
			return err
		}
	}
	return nil
}
