package store

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/extsort"
	"github.com/iocorr/iocorr/rundir"
)

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
	// PicksUnseen are the MoE layers whose router picks no probe saw
	// (correlate.Result.PicksUnseen): their counts of picks are NA.
	PicksUnseen []uint16 `json:"picks_unseen_layers,omitempty"`
	// PicksUnseenCalls are the calls whose picks of other MoE layers
	// were not all seen (correlate.Result.PicksUnseenCalls): their counts
	// in those calls' tokens and phase are NA.
	PicksUnseenCalls []event.PicksUnseenCall `json:"picks_unseen_calls,omitempty"`
	PendingCapped    uint64                  `json:"readahead_windows_capped,omitempty"`
	// HeldAggsPeak and HeldTokensPeak are the most aggregate rows, and
	// tokens with rows, the correlator held at once while building: the
	// build's memory, bounded whatever the run's length.
	HeldAggsPeak   uint64 `json:"held_aggregate_rows_peak,omitempty"`
	HeldTokensPeak uint64 `json:"held_tokens_peak,omitempty"`
	FaultsByMaps   uint64 `json:"faults_resolved_by_maps,omitempty"`
	// FaultsCounted are the faults outside the model files the kernel
	// counted instead of recording each (correlate.Stats.FaultsCounted).
	FaultsCounted uint64 `json:"faults_counted_in_kernel,omitempty"`
	MapsMissing   uint64 `json:"maps_snapshots_missing,omitempty"`
	// Incomplete is set when the recording said it stopped early.
	Incomplete bool  `json:"incomplete,omitempty"`
	BuildNS    int64 `json:"build_ns"`
	// AlreadyBuilt is set (not stored) when the ingest found a complete store.
	AlreadyBuilt bool `json:"-"`
}

// PicksNA says why the run's picks are incomplete: "" when every MoE
// layer's were seen in every call (or none were: rundir.Meta.PicksNA
// says why).
func (s *Summary) PicksNA() string { return s.PicksNAOf(nil) }

// PicksNAOf says why the picks a query selects (its tokens, phase and
// layer; nil selects all) are incomplete: "" when every pick of them was
// seen.
func (s *Summary) PicksNAOf(q *Query) string {
	var why []string
	if layers := s.unseenLayers(q); len(layers) > 0 {
		why = append(why, fmt.Sprintf("the router's expert picks of layer %s were not seen: llama.cpp computed those layers' experts on another backend (a GPU's), where no CPU graph reads the router's output", layerList(layers)))
	}
	if calls := s.unseenCalls(q); len(calls) > 0 {
		why = append(why, unseenCallsNA(calls))
	}
	return strings.Join(why, "; ")
}

// unseenLayers are the layers of PicksUnseen q selects.
func (s *Summary) unseenLayers(q *Query) []uint16 {
	if q == nil || q.Layer == nil {
		return s.PicksUnseen
	}
	if slices.Contains(s.PicksUnseen, uint16(*q.Layer)) {
		return []uint16{uint16(*q.Layer)}
	}
	return nil
}

// unseenCalls are the calls of PicksUnseenCalls q selects, each with only
// the layers it selects.
func (s *Summary) unseenCalls(q *Query) []event.PicksUnseenCall {
	var calls []event.PicksUnseenCall
	for _, c := range s.PicksUnseenCalls {
		if q != nil && (q.Token != nil && (c.Token < q.Token[0] || c.Token > q.Token[1]) ||
			q.Phase != "" && !strings.EqualFold(q.Phase, event.PhaseName(c.Phase))) {
			continue
		}
		if q != nil && q.Layer != nil {
			i := slices.IndexFunc(c.Layers, func(l event.PicksUnseenLayer) bool { return int(l.Layer) == *q.Layer })
			if i < 0 {
				continue
			}
			c.Layers = c.Layers[i : i+1]
		}
		calls = append(calls, c)
	}
	return calls
}

// unseenCallsShown bounds the calls a reason names one by one.
const unseenCallsShown = 3

// unseenCallsNA says which calls' picks were not all seen, per call its
// layers and the rows of them seen, and why.
func unseenCallsNA(calls []event.PicksUnseenCall) string {
	phases := map[string]int{}
	var parts []string
	var offloaded, unread, partly bool
	for i, c := range calls {
		phases[event.PhaseName(c.Phase)]++
		// Layers with the same rows seen, together.
		byRows := map[int32][]uint16{}
		for _, l := range c.Layers {
			byRows[l.Rows] = append(byRows[l.Rows], l.Layer)
			offloaded = offloaded || l.Rows == 0 && c.Offload
			unread = unread || l.Rows == 0 && !c.Offload
			partly = partly || l.Rows > 0
		}
		if i >= unseenCallsShown {
			continue
		}
		var ls []string
		for _, n := range slices.Sorted(maps.Keys(byRows)) {
			seen := "none"
			if n > 0 {
				seen = strconv.Itoa(int(n))
			}
			ls = append(ls, fmt.Sprintf("layer %s %s of %d rows seen", layerList(byRows[n]), seen, c.Tokens))
		}
		parts = append(parts, fmt.Sprintf("token %d (%s, %d tokens): %s", c.Token, event.PhaseName(c.Phase), c.Tokens, strings.Join(ls, ", ")))
	}
	if len(calls) > unseenCallsShown {
		parts = append(parts, fmt.Sprintf("and %d more", len(calls)-unseenCallsShown))
	}
	var counts []string
	for _, p := range slices.Sorted(maps.Keys(phases)) {
		counts = append(counts, fmt.Sprintf("%d %s", phases[p], p))
	}
	var causes []string
	if offloaded {
		causes = append(causes, "their experts stayed on the CPU, but llama.cpp's op offload ran those batches' MUL_MAT_ID on the GPU (from GGML_OP_OFFLOAD_MIN_BATCH tokens, 32 by default), where no CPU graph reads the router's ids; --no-op-offload keeps it on the CPU")
	}
	if unread {
		causes = append(causes, "the probe did not read the rows of layers none of whose rows were seen")
	}
	if partly {
		causes = append(causes, "where some rows were seen, the probe did not read the others (or, with layers on a GPU, op offload ran a ubatch of the call there)")
	}
	return fmt.Sprintf("the router's expert picks were not all seen in %s llama_decode call(s) (%s): %s", strings.Join(counts, " and "), strings.Join(parts, "; "), strings.Join(causes, "; "))
}

// layerList names layers, runs of consecutive ones as ranges: "0-6, 9".
func layerList(layers []uint16) string {
	var out []string
	for i := 0; i < len(layers); {
		j := i
		for j+1 < len(layers) && layers[j+1] == layers[j]+1 {
			j++
		}
		if j > i {
			out = append(out, fmt.Sprintf("%d-%d", layers[i], layers[j]))
		} else {
			out = append(out, strconv.Itoa(int(layers[i])))
		}
		i = j + 1
	}
	return strings.Join(out, ", ")
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
//
// The build writes sorted tables straight to the last level through
// badger's StreamWriter, so there are no memtables to fill and nothing to
// compact: the memtable is the smallest badger takes (it holds only what
// RewriteFormatVersion writes in tests) and no compactor runs. Written by
// memtables instead, the build's peak grew with the run, ~17 bytes per
// record (120 MiB at 0.6 M records, 365 MiB at 9.6 M), all of it
// compactions: a larger store meant more tables merged at once, each
// with its table builder's buffers.
func bulkOptions(path string) badger.Options {
	return badger.DefaultOptions(path).
		WithLogger(nil).
		WithSyncWrites(false).
		WithDetectConflicts(false).
		WithNumVersionsToKeep(1).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithMemTableSize(1 << 20).
		WithNumMemtables(1).
		WithNumCompactors(0).
		WithBaseTableSize(lastLevelTableSize >> (bulkMaxLevels - 2)).
		WithMaxLevels(bulkMaxLevels).
		WithValueThreshold(4096)
}

// lastLevelTableSize is the size of the tables the StreamWriter writes.
// Each table's builder holds twice it until the table is written and
// synced, and the StreamWriter has up to 16 tables in flight when the
// disk lags, as it does the longer the run: at 4 MiB the build's peak
// still grew 11 bytes per record (113 → 139 MiB from 1.2 to 3.6 M
// records); at 2 MiB it is 77 → 83 MiB from 2.4 to 9.6 M. Only keys and
// small values go in tables (event chunks go to the value log), so a
// 280 MiB store is 67 files.
const lastLevelTableSize = 2 << 20

// bulkMaxLevels is badger's default number of levels: the StreamWriter
// writes to the last, at a table size of the base's times 2^(levels-2).
const bulkMaxLevels = 7

// Writer builds DIR/db for whoever drives the ingest (package pipeline):
// it takes the run's build lock, says whether the store is already
// complete, and writes attributed events (it is a event.Sink) and then
// the correlator's result. It does not read the spool or attribute.
//
// It is crash-safe by building aside and renaming: the store is written to
// DIR/db.tmp, which any new Writer discards first, and becomes DIR/db only
// in Commit, after it is complete, synced and closed. DIR/db is therefore
// absent, the previous store, or the new one, never half written; a
// crashed build is resumed by ingesting again, which starts over from the
// spool (the source of truth: a rebuild takes seconds).
type Writer struct {
	dir    string
	final  string
	unlock func()
	db     *badger.DB
	ch     *chunker
	tl     *timeline
	// kvs gathers every key and value of the store, in the order they
	// come, sorted aside: Commit writes them in key order as the store's
	// tables, so the build holds a bounded part of the store whatever the
	// run's length.
	kvs *extsort.Sorter[kv]
	rel *releaser // drops the store's written pages from the resident set
	// aggs gathers the aggregate rows the correlator hands over (Agg):
	// partial rows in any order, sorted aside and summed at Commit, so
	// the build holds a bounded number of them whatever the run's length.
	aggs *extsort.Sorter[event.Agg]
}

// aggsInMemory bounds the handed-over rows held before a sorted run of
// them is spilled: ~120 B each, 2 MiB. A 4.5 GiB MoE run's 79 tokens
// had 41 Ki distinct rows; the merge at Commit reads a run per 16 Ki.
const aggsInMemory = 1 << 14

// DefaultChunkEvents is the number of events per stored chunk.
const DefaultChunkEvents = 4096

// Begin takes DIR's build lock and removes what a crashed build left. Close
// the Writer in every case.
func Begin(dir string) (*Writer, error) {
	unlock, err := lockBuild(dir)
	if err != nil {
		return nil, err
	}
	w := &Writer{dir: dir, final: filepath.Join(dir, rundir.DBDir), unlock: unlock}
	// Holding the lock, whatever db.tmp or db.old exists is a crashed
	// build's: nobody is writing it.
	os.RemoveAll(w.final + ".old")
	if err := os.RemoveAll(w.final + ".tmp"); err != nil {
		unlock()
		return nil, fmt.Errorf("removing an unfinished store: %w", err)
	}
	return w, nil
}

// Current returns the summary of DIR/db when it is complete, of this store
// format, and built from a spool of this size and modification time.
func (w *Writer) Current(spoolSize, spoolModNS int64) (Summary, bool) {
	s, err := readSummary(w.final)
	if err != nil || s.FormatVersion != FormatVersion || s.SpoolSize != spoolSize || s.SpoolModNS != spoolModNS {
		return Summary{}, false
	}
	s.AlreadyBuilt = true
	return s, true
}

// Create starts the new store in DIR/db.tmp. tensors is the correlator's
// tensor table (complete before the first event: pseudo tensors, then the
// models'), which gives the layer index its layers; chunkEvents ≤ 0 means
// DefaultChunkEvents.
func (w *Writer) Create(tensors []event.Tensor, chunkEvents int) error {
	if chunkEvents <= 0 {
		chunkEvents = DefaultChunkEvents
	}
	// A chunk is one value: keep it far below badger's value size limit.
	chunkEvents = min(chunkEvents, 1<<16)
	db, err := badger.Open(bulkOptions(w.final + ".tmp"))
	if err != nil {
		return fmt.Errorf("creating store: %w", err)
	}
	w.db = db
	w.kvs = extsort.NewSized(kvBytesInMemory, kvSize, compareKVs, kvCodec)
	w.rel = newReleaser(w.final + ".tmp")
	w.rel.writable = true
	w.ch = newChunker(w.put, chunkEvents)
	w.tl = &timeline{put: w.put}
	for _, t := range tensors {
		w.ch.layers = append(w.ch.layers, t.Layer)
	}
	return nil
}

// Event stores one attributed event: the Writer is the correlator's sink.
func (w *Writer) Event(e *event.Event) error { return w.ch.Event(e) }

// Agg takes one aggregate row, or part of one: rows of the same key are
// summed at Commit, so a row may come in pieces, in any order. The Writer
// is the correlator's aggregate sink (correlate.AggSink).
func (w *Writer) Agg(a *event.Agg) error {
	if w.aggs == nil {
		w.aggs = extsort.New(aggsInMemory, compareAggs, aggCodec)
	}
	return w.aggs.Add(*a)
}

// Mark stores one timeline mark: the Writer is the correlator's mark sink.
func (w *Writer) Mark(m *event.Mark) error { return w.tl.Mark(m) }

// timeline packs timeline marks into chunks of markChunkLen, in the order
// they come.
type timeline struct {
	put func(k, v []byte) error
	buf []event.Mark
	seq uint32
}

const markChunkLen = 4096

func (t *timeline) Mark(m *event.Mark) error {
	t.buf = append(t.buf, *m)
	if len(t.buf) >= markChunkLen {
		return t.flush()
	}
	return nil
}

func (t *timeline) flush() error {
	if len(t.buf) == 0 {
		return nil
	}
	if err := t.put(markChunkKey(t.seq), appendMarkChunk(nil, t.buf)); err != nil {
		return fmt.Errorf("writing timeline: %w", err)
	}
	t.seq++
	t.buf = t.buf[:0]
	return nil
}

// Commit writes the last events, the dictionaries and aggregates of res,
// and sum (its format version and chunk count filled in) as the last key;
// then it syncs and closes the store and renames it to DIR/db.
func (w *Writer) Commit(res *event.Result, sum *Summary) error {
	if err := w.writeAll(res, sum); err != nil {
		return err
	}
	err := w.db.Close()
	w.db = nil
	if err != nil {
		return fmt.Errorf("closing store: %w", err)
	}
	old := w.final + ".old"
	if err := os.Rename(w.final, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replacing the store: %w", err)
	}
	if err := os.Rename(w.final+".tmp", w.final); err != nil {
		return fmt.Errorf("installing the store: %w", err)
	}
	syncDir(w.dir)
	os.RemoveAll(old)
	return nil
}

// Close releases the build lock and discards a store that was not
// committed.
func (w *Writer) Close() {
	if w.db != nil {
		w.db.Close()
		w.db = nil
	}
	if w.kvs != nil {
		w.kvs.Close()
	}
	if w.aggs != nil {
		w.aggs.Close()
	}
	os.RemoveAll(w.final + ".tmp")
	w.unlock()
}

// lockBuild takes DIR's build lock, so that two builds of one run (two
// `iocorr ingest` at once) never write, or remove, each other's db.tmp.
// Readers take no part: they open DIR/db, which a build only renames.
func lockBuild(dir string) (func(), error) {
	path := filepath.Join(dir, ".db.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if errors.Is(err, os.ErrPermission) {
		f, err = os.Open(path) // another user's lock file: flock needs no write access
	}
	if err != nil {
		return nil, fmt.Errorf("locking the store of %s: %w", dir, err)
	}
	if busy, err := lockFile(f); busy || err != nil {
		f.Close()
		if busy {
			return nil, fmt.Errorf("another ingest is building the store of %s", dir)
		}
		return nil, fmt.Errorf("locking the store of %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// syncDir makes the rename durable. A failure only risks redoing the build
// after a power loss, so it is not reported.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// stampSet collects the distinct values of one index dimension in a chunk
// without a map operation per event: a value is new when its stamp is not
// the current chunk's.
type stampSet struct {
	stamp []uint32
	vals  []uint32
	big   map[uint32]uint32 // values too large for stamp
}

const maxStamped = 1 << 20

func (s *stampSet) add(v, chunk uint32) {
	if v < maxStamped {
		if int(v) >= len(s.stamp) {
			s.stamp = append(s.stamp, make([]uint32, int(v)+1-len(s.stamp)+64)...)
		}
		if s.stamp[v] == chunk {
			return
		}
		s.stamp[v] = chunk
	} else {
		if s.big == nil {
			s.big = map[uint32]uint32{}
		}
		if s.big[v] == chunk {
			return
		}
		s.big[v] = chunk
	}
	s.vals = append(s.vals, v)
}

// chunker is the correlator's sink: it packs events into chunks of
// ChunkEvents and puts each with its secondary index keys. One value
// buffer is reused: the store's sorter copies what it is given.
type chunker struct {
	put    func(k, v []byte) error
	layers []int // the layer of each tensor id
	buf    []event.Event
	val    []byte
	size   int
	seq    uint32
	chunks uint64
	idx    [len(chunkIndexes)]stampSet
	key    []byte
}

func newChunker(put func(k, v []byte) error, size int) *chunker {
	return &chunker{put: put, size: size, buf: make([]event.Event, 0, size), val: make([]byte, 0, size*maxEventLen/4)}
}

func (c *chunker) Event(e *event.Event) error {
	// A full chunk ends before the next record, never inside one: each
	// chunk is sorted by time on its own, and a record cut over two could
	// come back in two pieces (Store.Records) once an earlier-stamped,
	// held-back page add sorts ahead of its rest.
	if n := len(c.buf); n >= c.size && (e.Req == 0 || e.Req != c.buf[n-1].Req) {
		if err := c.flush(); err != nil {
			return err
		}
	}
	c.buf = append(c.buf, *e)
	return nil
}

func (c *chunker) flush() error {
	if len(c.buf) == 0 {
		return nil
	}
	// Held-back page adds arrive a little late: order the chunk by time.
	sorted := true
	for i := 1; i < len(c.buf); i++ {
		if c.buf[i].Ts < c.buf[i-1].Ts {
			sorted = false
			break
		}
	}
	if !sorted {
		slices.SortStableFunc(c.buf, func(a, b event.Event) int {
			switch {
			case a.Ts < b.Ts:
				return -1
			case a.Ts > b.Ts:
				return 1
			}
			return 0
		})
	}
	c.seq++
	ck := chunkKey(c.buf[0].Ts, c.seq)
	c.val = appendChunk(c.val[:0], c.buf)
	if err := c.put(ck, c.val); err != nil {
		return fmt.Errorf("writing events: %w", err)
	}
	stamp := c.seq
	for i := range c.idx {
		c.idx[i].vals = c.idx[i].vals[:0]
	}
	for i := range c.buf {
		e := &c.buf[i]
		layer := -1
		if int(e.Tensor) < len(c.layers) {
			layer = c.layers[e.Tensor]
		}
		for j, v := range chunkIndexValues(e, layer) {
			c.idx[j].add(v, stamp)
		}
	}
	for i := range c.idx {
		ix := chunkIndexes[i]
		for _, v := range c.idx[i].vals {
			c.key = ix.key(c.key[:0], v, ck)
			if err := c.put(c.key, nil); err != nil {
				return fmt.Errorf("writing event index: %w", err)
			}
		}
	}
	c.chunks++
	c.buf = c.buf[:0]
	return nil
}

func (w *Writer) writeAll(res *event.Result, sum *Summary) error {
	if err := w.ch.flush(); err != nil {
		return err
	}
	if err := w.tl.flush(); err != nil {
		return err
	}
	rows, err := writeResult(w.put, res, w.aggs)
	if w.aggs != nil {
		w.aggs.Close() // done with, or failed: its temporary file goes now
		w.aggs = nil
	}
	if err != nil {
		return err
	}
	if rows >= 0 {
		sum.AggRows = rows
	}
	sum.FormatVersion = FormatVersion
	sum.Chunks = w.ch.chunks
	// The summary is the build's completion marker. The store only
	// becomes DIR/db after it is written, so a reader never sees a store
	// without one.
	b, err := summaryValue(sum)
	if err != nil {
		return fmt.Errorf("encoding store summary: %w", err)
	}
	if err := w.put(summaryKey, b); err != nil {
		return fmt.Errorf("writing store summary: %w", err)
	}
	if err := w.stream(); err != nil {
		return err
	}
	// Writes were not synced while building; one sync at the end makes
	// the store durable before it is renamed into place.
	if err := w.db.Sync(); err != nil {
		return fmt.Errorf("syncing store: %w", err)
	}
	return nil
}

// writeResult writes the dictionaries and the per-run aggregates: the
// rows of res.Aggs and, when streamed is not nil, the rows handed over to
// it, summed by key. With streamed rows it fills in res.Tokens' touched
// counts (the correlator could not, holding a few tokens at a time) and
// returns the number of rows; otherwise it returns -1.
func writeResult(put func(k, v []byte) error, res *event.Result, streamed *extsort.Sorter[event.Agg]) (int, error) {
	set := func(k, v []byte) error {
		if err := put(k, v); err != nil {
			return fmt.Errorf("writing aggregates: %w", err)
		}
		return nil
	}
	for i := range res.Tensors {
		v, err := tensorValue(&res.Tensors[i])
		if err != nil {
			return 0, err
		}
		if err := set(tensorKey(res.Tensors[i].ID), v); err != nil {
			return 0, err
		}
	}
	for id, name := range res.Ops {
		if err := set(opKey(uint32(id)), opValue(name)); err != nil {
			return 0, err
		}
	}
	f := aggFolder{set: set, phaseOf: tokenPhases(res.Tokens), totals: map[phaseAggKey]*event.Counters{}}
	rows := -1
	if streamed == nil {
		for i := range res.Aggs {
			if err := f.row(&res.Aggs[i]); err != nil {
				return 0, err
			}
		}
	} else {
		for i := range res.Aggs {
			if err := streamed.Add(res.Aggs[i]); err != nil {
				return 0, err
			}
		}
		f.touched = map[uint32]*[2]uint32{}
		if err := sumAggs(streamed, f.row); err != nil {
			return 0, err
		}
		rows = f.rows
		for i := range res.Tokens {
			t := &res.Tokens[i]
			t.TensorsTouched, t.ExpertsTouched = 0, 0
			if n := f.touched[t.Token]; n != nil {
				t.TensorsTouched, t.ExpertsTouched = n[0], n[1]
			}
		}
	}
	if err := f.end(); err != nil {
		return 0, err
	}
	for i := range res.Tokens {
		t := &res.Tokens[i]
		if err := set(tokenKey(t.Token), appendTokenInfo(nil, t)); err != nil {
			return 0, err
		}
	}
	picks := map[phasePick]uint64{}
	for i := range res.Experts {
		e := &res.Experts[i]
		if err := set(expertSelKey(e), appendExpertSelValue(nil, e)); err != nil {
			return 0, err
		}
		picks[phasePick{Phase: f.phaseOf[e.Token], Layer: e.Layer, Expert: e.Expert}] += e.Count
	}
	for p, n := range picks {
		p.Count = n
		if err := set(selPhaseKey(&p), appendPhasePickValue(nil, &p)); err != nil {
			return 0, err
		}
	}
	return rows, nil
}

// tokenPhases is each token's phase; a token without a row (token 0, the
// load before the first llama_decode) is looked up as phase none, the
// zero value, here and in the queries by token (queryPlan.phaseOf).
func tokenPhases(tokens []event.TokenInfo) map[uint32]uint8 {
	m := make(map[uint32]uint8, len(tokens))
	for i := range tokens {
		m[tokens[i].Token] = tokens[i].Phase
	}
	return m
}

// compareAggs orders rows by token, tensor, expert, op: the order the
// folded rows are runs of.
func compareAggs(a, b *event.Agg) int {
	switch {
	case a.Token != b.Token:
		return cmp.Compare(a.Token, b.Token)
	case a.Tensor != b.Tensor:
		return cmp.Compare(a.Tensor, b.Tensor)
	case a.Expert != b.Expert:
		return cmp.Compare(a.Expert, b.Expert)
	}
	return cmp.Compare(a.Op, b.Op)
}

// aggCodec spills a row as its aggregate key and its counters.
var aggCodec = extsort.Codec[event.Agg]{
	Append: func(b []byte, a *event.Agg) []byte {
		return appendCounters(append(b, aggTensorKey(a.AggKey)...), &a.Counters)
	},
	Decode: func(b []byte, a *event.Agg) error {
		if len(b) < 15 {
			return fmt.Errorf("spilled aggregate row of %d bytes is cut short", len(b))
		}
		k, err := parseAggTensorKey(b[:15])
		if err != nil {
			return err
		}
		a.AggKey = k
		return parseCounters(b[15:], &a.Counters)
	},
}

// sumAggs calls fn with the sorted rows of s, each key once with its
// pieces summed.
func sumAggs(s *extsort.Sorter[event.Agg], fn func(*event.Agg) error) error {
	var cur event.Agg
	have := false
	err := s.Each(func(a *event.Agg) error {
		if have && a.AggKey == cur.AggKey {
			cur.Counters.Add(&a.Counters)
			return nil
		}
		if have {
			if err := fn(&cur); err != nil {
				return err
			}
		}
		cur, have = *a, true
		return nil
	})
	if err != nil || !have {
		return err
	}
	return fn(&cur)
}

// aggFolder writes sorted, distinct rows, and the rows folded over op and
// over expert and op, which are runs of adjacent rows; it counts, when
// touched is set, each token's real tensors and (tensor, expert) pairs.
// It sums the run's totals by phase (the tokens of a phase folded), which
// are not runs of adjacent rows: in a map of a row per tensor, expert and
// op of each phase, bounded by the model's shape, not the run's length;
// at the end, those folded over experts and ops too.
type aggFolder struct {
	set        func(k, v []byte) error
	byOp, byTT event.Counters
	prev       event.AggKey
	have       bool
	rows       int
	touched    map[uint32]*[2]uint32
	phaseOf    map[uint32]uint8
	totals     map[phaseAggKey]*event.Counters
}

func (f *aggFolder) row(a *event.Agg) error {
	p := f.prev
	newExpert := !f.have || a.Token != p.Token || a.Tensor != p.Tensor || a.Expert != p.Expert
	newTensor := !f.have || a.Token != p.Token || a.Tensor != p.Tensor
	if f.have && newExpert {
		if err := f.set(aggTokenKey(p), appendCounters(nil, &f.byOp)); err != nil {
			return err
		}
		f.byOp = event.Counters{}
	}
	if f.have && newTensor {
		if err := f.set(aggTTKey(p.Tensor, p.Token), appendCounters(nil, &f.byTT)); err != nil {
			return err
		}
		f.byTT = event.Counters{}
	}
	if err := f.set(aggTensorKey(a.AggKey), appendCounters(nil, &a.Counters)); err != nil {
		return err
	}
	f.byOp.Add(&a.Counters)
	f.byTT.Add(&a.Counters)
	tk := phaseAggKey{Tensor: a.Tensor, Phase: f.phaseOf[a.Token], Expert: a.Expert, Op: a.Op}
	c := f.totals[tk]
	if c == nil {
		c = new(event.Counters)
		f.totals[tk] = c
	}
	c.Add(&a.Counters)
	f.prev, f.have = a.AggKey, true
	f.rows++
	if f.touched != nil && a.Tensor >= event.FirstTensor && newExpert {
		n := f.touched[a.Token]
		if n == nil {
			n = new([2]uint32)
			f.touched[a.Token] = n
		}
		if newTensor {
			n[0]++
		}
		if a.Expert >= 0 {
			n[1]++
		}
	}
	return nil
}

// end writes the folded rows of the last run, and the totals by phase.
func (f *aggFolder) end() error {
	if !f.have {
		return nil
	}
	if err := f.set(aggTokenKey(f.prev), appendCounters(nil, &f.byOp)); err != nil {
		return err
	}
	if err := f.set(aggTTKey(f.prev.Tensor, f.prev.Token), appendCounters(nil, &f.byTT)); err != nil {
		return err
	}
	byTensor := map[phaseAggKey]*event.Counters{}
	for k, c := range f.totals {
		if err := f.set(aggPhaseKey(k), appendCounters(nil, c)); err != nil {
			return err
		}
		tk := phaseAggKey{Tensor: k.Tensor, Phase: k.Phase, Expert: -1}
		t := byTensor[tk]
		if t == nil {
			t = new(event.Counters)
			byTensor[tk] = t
		}
		t.Add(c)
	}
	for k, c := range byTensor {
		if err := f.set(ttPhaseKey(k.Tensor, k.Phase), appendCounters(nil, c)); err != nil {
			return err
		}
	}
	return nil
}
