package store_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

func builtRun(t *testing.T, n, tokens int) (string, synthTotals, *store.Store) {
	t.Helper()
	dir := t.TempDir()
	tot := writeSynthRun(t, dir, n, tokens)
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{ChunkEvents: 64}); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return dir, tot, st
}

func TestBuildIsIdempotentAndDiscardsAnUnfinishedBuild(t *testing.T) {
	dir := t.TempDir()
	writeSynthRun(t, dir, 1000, 4)
	// What a crash mid-build leaves behind.
	if err := os.MkdirAll(filepath.Join(dir, rundir.DBDir+".tmp", "junk"), 0o755); err != nil {
		t.Fatal(err)
	}
	s1, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s1.AlreadyBuilt || s1.Records != 1000 {
		t.Fatalf("first build %+v, want 1000 records built", s1)
	}
	if _, err := os.Stat(filepath.Join(dir, rundir.DBDir+".tmp")); !os.IsNotExist(err) {
		t.Errorf("db.tmp left behind: %v", err)
	}
	s2, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil || !s2.AlreadyBuilt || s2.Events != s1.Events {
		t.Fatalf("second build %+v %v, want the store found complete", s2, err)
	}
	s3, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{Force: true})
	if err != nil || s3.AlreadyBuilt || s3.Events != s1.Events {
		t.Fatalf("forced build %+v %v, want a rebuild with the same events", s3, err)
	}
	// Two readers at once.
	a, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := store.Open(dir)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	b.Close()
}

func TestBuildStopsWhenCancelledAndLeavesNoStore(t *testing.T) {
	dir := t.TempDir()
	writeSynthRun(t, dir, 1000, 4)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := pipeline.Ingest(ctx, dir, pipeline.Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if _, err := store.Open(dir); !errors.Is(err, store.ErrNoStore) {
		t.Fatalf("open after a cancelled build: %v, want store.ErrNoStore", err)
	}
}

func TestStoreTotalsEqualWhatWasRecorded(t *testing.T) {
	_, tot, st := builtRun(t, 5000, 5)
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	var byTok, byAgg event.Counters
	for _, tk := range toks {
		byTok.Add(&tk.Counters)
	}
	if err := st.Aggs(func(a *event.Agg) error { byAgg.Add(&a.Counters); return nil }); err != nil {
		t.Fatal(err)
	}
	want := event.Counters{Faults: tot.faults, Major: tot.major, Minor: tot.faults - tot.major, ReadBytes: tot.readBytes, AddedBytes: tot.added, EvictedBytes: tot.evicted,
		// The synthetic run's folios are single pages.
		PagesAdded: tot.added / kernel.PageSize, PagesEvicted: tot.evicted / kernel.PageSize}
	for name, got := range map[string]event.Counters{"tokens": byTok, "aggregates": byAgg} {
		if got.Faults != want.Faults || got.Major != want.Major || got.ReadBytes != want.ReadBytes || got.AddedBytes != want.AddedBytes ||
			got.EvictedBytes != want.EvictedBytes || got.PagesAdded != want.PagesAdded || got.PagesEvicted != want.PagesEvicted || want.PagesAdded == 0 || want.PagesEvicted == 0 {
			t.Errorf("%s sum %+v, want %+v", name, got, want)
		}
	}
	// Every event is stored once.
	var n, bytesAdded uint64
	if err := st.Events(store.EventFilter{}, func(e *event.Event) error {
		n++
		if e.Kind == event.KindPageAdd {
			bytesAdded += e.Bytes
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n != st.Summary.Events || bytesAdded != tot.added {
		t.Errorf("stored %d events (%d added bytes), want %d (%d)", n, bytesAdded, st.Summary.Events, tot.added)
	}
}

func TestEventsOfOneTensorUseTheIndex(t *testing.T) {
	_, _, st := builtRun(t, 3000, 3)
	ids, err := st.MatchTensors("blk.2.attn_q.weight", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var all, sel int
	st.Events(store.EventFilter{}, func(e *event.Event) error {
		if ids[e.Tensor] {
			all++
		}
		return nil
	})
	st.Events(store.EventFilter{Tensors: ids}, func(e *event.Event) error {
		if !ids[e.Tensor] {
			t.Fatalf("event of tensor %d passed the filter", e.Tensor)
		}
		sel++
		return nil
	})
	if all == 0 || sel != all {
		t.Errorf("indexed read found %d events, full scan %d", sel, all)
	}
}

func TestQueryFiltersAndGroups(t *testing.T) {
	_, _, st := builtRun(t, 6000, 6)
	total := func(rows []store.Row) (c event.Counters) {
		for i := range rows {
			c.Add(&rows[i].Counters)
		}
		return c
	}
	all, err := st.Query(store.Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("got %d token rows, want 6", len(all))
	}
	if all[0].Token != 1 || all[0].Phase != event.PhasePrefill || all[1].Phase != event.PhaseDecode {
		t.Errorf("first rows %+v %+v, want token 1 prefill then decode", all[0], all[1])
	}
	grand := total(all)
	two := 2
	three := 3
	tests := []struct {
		name  string
		q     store.Query
		rows  int
		check func(t *testing.T, rows []store.Row)
	}{
		{"glob over layers, by layer", store.Query{Tensor: "blk.*.ffn_up_exps.weight", By: "layer"}, synLayers, nil},
		{"by tensor covers everything", store.Query{By: "tensor"}, 2 * synLayers, func(t *testing.T, rows []store.Row) {
			if total(rows) != grand {
				t.Errorf("by tensor sums to %+v, want %+v", total(rows), grand)
			}
		}},
		{"one token", store.Query{Token: &[2]uint32{3, 3}}, 1, func(t *testing.T, rows []store.Row) {
			if rows[0].Token != 3 {
				t.Errorf("row of token %d", rows[0].Token)
			}
		}},
		{"token range", store.Query{Token: &[2]uint32{2, 4}}, 3, nil},
		{"layer", store.Query{Layer: &two, By: "tensor"}, 2, func(t *testing.T, rows []store.Row) {
			for _, r := range rows {
				if !strings.HasPrefix(r.Key, "blk.2.") {
					t.Errorf("row %s is not of layer 2", r.Key)
				}
			}
		}},
		{"expert", store.Query{Expert: &three, By: "expert"}, 1, func(t *testing.T, rows []store.Row) {
			if rows[0].Key != "3" || rows[0].Faults == 0 {
				t.Errorf("row %+v, want expert 3 with faults", rows[0])
			}
		}},
		{"phase", store.Query{Phase: "prefill", By: "phase"}, 1, nil},
		// The synthetic run's batches carry no sequence set: every token is
		// charged to the unknown request, never dropped.
		{"by request of batches not read", store.Query{By: "request"}, 1, func(t *testing.T, rows []store.Row) {
			if rows[0].Key != event.RequestUnknown || total(rows) != grand {
				t.Errorf("rows %+v, want one %s row of %+v", rows, event.RequestUnknown, grand)
			}
		}},
		{"by expert includes dense as -1", store.Query{By: "expert"}, synExps + 1, nil},
		{"top by faults", store.Query{By: "tensor", Sort: "faults", Top: 3}, 3, func(t *testing.T, rows []store.Row) {
			if rows[0].Faults < rows[1].Faults || rows[1].Faults < rows[2].Faults {
				t.Errorf("rows not sorted by faults: %d %d %d", rows[0].Faults, rows[1].Faults, rows[2].Faults)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := st.Query(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != tc.rows {
				t.Fatalf("got %d rows, want %d: %+v", len(rows), tc.rows, rows)
			}
			if tc.check != nil {
				tc.check(t, rows)
			}
		})
	}
}

func TestQueryRejectsBadInputWithOneLineErrors(t *testing.T) {
	_, _, st := builtRun(t, 600, 2)
	tests := []struct {
		name string
		q    store.Query
		want string
	}{
		{"unknown tensor names the closest", store.Query{Tensor: "blk.1.attn_qq.weight"}, `unknown tensor "blk.1.attn_qq.weight" (closest: blk.1.attn_q.weight`},
		{"glob matching nothing names the closest globs", store.Query{Tensor: "blk.*.ffn_upexps.weight"}, `(closest: blk.*.ffn_up_exps.weight, blk.*.attn_q.weight)`},
		{"bad glob", store.Query{Tensor: "blk.[.weight"}, "bad tensor pattern"},
		{"unknown op", store.Query{Op: "SOFTMAX"}, "unknown op"},
		{"unknown phase", store.Query{Phase: "warmup"}, "unknown phase"},
		{"unknown group", store.Query{By: "colour"}, "cannot group by"},
		{"unknown sort", store.Query{Sort: "speed"}, "cannot sort by"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := st.Query(tc.q)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one line containing %q", err, tc.want)
			}
		})
	}
}

func TestOpenSaysWhatIsMissing(t *testing.T) {
	run := t.TempDir()
	if err := rundir.WriteMeta(run, &rundir.Meta{}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Open(run); !errors.Is(err, store.ErrNoStore) {
		t.Errorf("run without a store: got %v, want store.ErrNoStore", err)
	}
	for _, dir := range []string{t.TempDir(), "/nonexistent"} {
		if _, err := store.Open(dir); err == nil || err.Error() != dir+" is not a run directory (no meta.json)" {
			t.Errorf("%s: got %v, want it is not a run directory", dir, err)
		}
	}
}

// BenchmarkIngest measures the whole build (spool read, decode, attribute,
// badger write) on a synthetic 10-million-event run generated once.
func BenchmarkIngest(b *testing.B) {
	dir := bigRun(b)
	b.ResetTimer()
	var s store.Summary
	for b.Loop() {
		var err error
		if s, err = pipeline.Ingest(context.Background(), dir, pipeline.Options{Force: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(s.RecordsPerSecond(), "events/s")
}

// BenchmarkQueryTensor is `iocorr query --tensor` end to end: open the
// store read-only, load the dictionaries, run the query, close.
func BenchmarkQueryTensor(b *testing.B) {
	dir := bigRun(b)
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		st, err := store.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		rows, err := st.Query(store.Query{Tensor: "blk.*.ffn_up_exps.weight"})
		if err != nil || len(rows) == 0 {
			b.Fatal(err, len(rows))
		}
		st.Close()
	}
	b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/query")
}

// bigRun generates the 10-million-event run once per process in a
// directory kept for the other benchmarks.
var bigDir string

// IOCORR_BENCH_DIR names a directory to keep the run in across
// invocations (it is generated when it has no spool).
func bigRun(b *testing.B) string {
	if bigDir != "" {
		return bigDir
	}
	n := 10_000_000
	if testing.Short() {
		n = 1_000_000
	}
	if dir := os.Getenv("IOCORR_BENCH_DIR"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, rundir.SpoolFile)); err != nil {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			writeSynthRun(b, dir, n, 1000)
		}
		bigDir = dir
		return dir
	}
	dir, err := os.MkdirTemp("", "iocorr-bench-")
	if err != nil {
		b.Fatal(err)
	}
	writeSynthRun(b, dir, n, 1000)
	bigDir, removeBig = dir, true
	return dir
}

var removeBig bool

func TestMain(m *testing.M) {
	code := m.Run()
	if removeBig {
		os.RemoveAll(bigDir)
	}
	os.Exit(code)
}

func TestFoldedRowsAgreeWithTheFinestRows(t *testing.T) {
	_, _, st := builtRun(t, 6000, 6)
	for _, id := range []uint32{event.FirstTensor, event.FirstTensor + 1} {
		fine := map[uint32]event.Counters{}
		if err := st.AggsOfTensor(id, func(a *event.Agg) error {
			c := fine[a.Token]
			c.Add(&a.Counters)
			fine[a.Token] = c
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		folded := map[uint32]event.Counters{}
		if err := st.TensorTokenAggs(id, func(a *event.Agg) error {
			folded[a.Token] = a.Counters
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		byToken := map[uint32]event.Counters{}
		if err := st.Aggs(func(a *event.Agg) error {
			if a.Tensor == id {
				c := byToken[a.Token]
				c.Add(&a.Counters)
				byToken[a.Token] = c
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if len(fine) == 0 || fmt.Sprint(fine) != fmt.Sprint(folded) || fmt.Sprint(fine) != fmt.Sprint(byToken) {
			t.Errorf("tensor %d: finest rows %v\nfolded %v\ntoken-major %v", id, fine, folded, byToken)
		}
	}
}

func TestEventFiltersReadTheIndexedChunksOnly(t *testing.T) {
	_, _, st := builtRun(t, 3000, 3)
	two := 2
	ids, err := st.MatchTensors("blk.2.attn_q.weight", nil, false)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := st.OpIDs("MUL_MAT")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		f    store.EventFilter
	}{
		{"tensor", store.EventFilter{Tensors: ids}},
		{"token", store.EventFilter{Tokens: &[2]uint32{2, 2}}},
		{"expert", store.EventFilter{Experts: map[int16]bool{5: true}}},
		{"layer", store.EventFilter{Layers: map[int]bool{two: true}}},
		{"op", store.EventFilter{Ops: ops}},
		{"several", store.EventFilter{Tokens: &[2]uint32{1, 2}, Layers: map[int]bool{1: true}, Experts: map[int16]bool{-1: true}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var all, sel int
			if err := st.Events(store.EventFilter{}, func(e *event.Event) error {
				if tc.f.Match(st, e) {
					all++
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if err := st.Events(tc.f, func(e *event.Event) error {
				if !tc.f.Match(st, e) {
					t.Fatalf("event %+v passed the filter", e)
				}
				sel++
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if all == 0 || sel != all {
				t.Errorf("indexed read found %d events, full scan %d", sel, all)
			}
		})
	}
}

func TestAStoreOfAnotherFormatIsRebuiltAndRefusedByReaders(t *testing.T) {
	dir := t.TempDir()
	writeSynthRun(t, dir, 500, 2)
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{}); err != nil {
		t.Fatal(err)
	}
	// Rewrite the summary as an older iocorr would have.
	if err := store.RewriteFormatVersion(dir, store.FormatVersion-1); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("store format %d is older than this iocorr's %d: re-run iocorr ingest --force %s", store.FormatVersion-1, store.FormatVersion, dir)
	if _, err := store.Open(dir); err == nil || err.Error() != want {
		t.Errorf("open of an old store: %v, want %q", err, want)
	}
	s2, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil || s2.AlreadyBuilt {
		t.Fatalf("build over an old store: %+v %v, want a rebuild", s2, err)
	}
	if _, err := store.Open(dir); err != nil {
		t.Errorf("open after the rebuild: %v", err)
	}
}

func TestAChangedSpoolIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	writeSynthRun(t, dir, 500, 2)
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{}); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, rundir.SpoolFile))
	writeSynthRun(t, dir, 800, 2)
	s, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil || s.AlreadyBuilt || s.Records != 800 {
		t.Fatalf("got %+v %v, want a rebuild of 800 records", s, err)
	}
}

// Queries open the store read-only: many at once, in goroutines and in
// other processes, while one more reader holds it open.
func TestReadOnlyQueriesRunConcurrently(t *testing.T) {
	dir, _, held := builtRun(t, 3000, 3)
	want, err := held.Query(store.Query{Tensor: "blk.*.ffn_up_exps.weight"})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for range 8 {
		wg.Go(func() {
			st, err := store.Open(dir)
			if err != nil {
				errs <- err
				return
			}
			defer st.Close()
			rows, err := st.Query(store.Query{Tensor: "blk.*.ffn_up_exps.weight"})
			if err == nil && fmt.Sprint(rows) != fmt.Sprint(want) {
				err = fmt.Errorf("concurrent query got %v, want %v", rows, want)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	var procs []*exec.Cmd
	for range 3 {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestHelperQueryProcess$")
		cmd.Env = append(os.Environ(), "IOCORR_HELPER_QUERY_DIR="+dir)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, p := range procs {
		if err := p.Wait(); err != nil {
			t.Errorf("query in another process: %v", err)
		}
	}
}

// TestHelperQueryProcess is the other process of
// TestReadOnlyQueriesRunConcurrently.
func TestHelperQueryProcess(t *testing.T) {
	dir := os.Getenv("IOCORR_HELPER_QUERY_DIR")
	if dir == "" {
		t.Skip("helper process")
	}
	for range 5 {
		st, err := store.Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Query(store.Query{Tensor: "blk.*.ffn_up_exps.weight", By: "expert"}); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
}

func TestASecondBuildOfOneRunAtOnceIsRefusedAndLeftoversGo(t *testing.T) {
	dir := t.TempDir()
	writeSynthRun(t, dir, 500, 2)
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{}); err != nil {
		t.Fatal(err)
	}
	unlock, err := store.LockBuild(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{Force: true}); err == nil || !strings.Contains(err.Error(), "another ingest") {
		t.Errorf("build while another holds the lock: %v", err)
	}
	unlock()
	// What a build killed mid-way leaves beside a complete store.
	os.MkdirAll(filepath.Join(dir, rundir.DBDir+".tmp"), 0o755)
	s, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil || !s.AlreadyBuilt {
		t.Fatalf("got %+v %v, want the complete store kept", s, err)
	}
	if _, err := os.Stat(filepath.Join(dir, rundir.DBDir+".tmp")); !os.IsNotExist(err) {
		t.Errorf("the killed build's db.tmp is still there: %v", err)
	}
}

// BenchmarkQueryBigMoE runs queries on a 10-million-event run of a large
// MoE model (48 layers × 128 experts, 200 tokens, every expert touched in
// every token: ~1.2 M finest aggregate rows), to see how queries scale
// with experts. IOCORR_BENCH_DIR keeps the run in DIR-moe.
func BenchmarkQueryBigMoE(b *testing.B) {
	n := 10_000_000
	if testing.Short() {
		n = 1_000_000
	}
	dir := os.Getenv("IOCORR_BENCH_DIR")
	if dir != "" {
		dir += "-moe"
		os.MkdirAll(dir, 0o755)
	} else {
		dir = b.TempDir()
	}
	if _, err := os.Stat(filepath.Join(dir, rundir.SpoolFile)); err != nil {
		writeSynthRunShape(b, dir, n, 200, synthShape{Layers: 48, Experts: 128})
	}
	sum, err := pipeline.Ingest(context.Background(), dir, pipeline.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d records, %d finest aggregate rows, built in %s", sum.Records, sum.AggRows, time.Duration(sum.BuildNS))
	for _, q := range []struct {
		name string
		q    store.Query
	}{
		{"tensor-glob-by-token", store.Query{Tensor: "blk.*.ffn_up_exps.weight"}},
		{"one-tensor-by-token", store.Query{Tensor: "blk.7.ffn_up_exps.weight"}},
		{"one-tensor-by-expert", store.Query{Tensor: "blk.7.ffn_up_exps.weight", By: "expert"}},
		{"expert-filter", store.Query{Tensor: "blk.7.ffn_up_exps.weight", Expert: new(int)}},
		{"everything-by-tensor", store.Query{By: "tensor", Sort: "faults", Top: 10}},
		{"everything-by-expert", store.Query{By: "expert"}},
	} {
		b.Run(q.name, func(b *testing.B) {
			for b.Loop() {
				st, err := store.Open(dir)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := st.Query(q.q); err != nil {
					b.Fatal(err)
				}
				st.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/query")
		})
	}
}
