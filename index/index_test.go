package index

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/rundir"
)

func builtRun(t *testing.T, n, tokens int) (string, synthTotals, *Store) {
	t.Helper()
	dir := t.TempDir()
	tot := writeSynthRun(t, dir, n, tokens)
	if _, err := Build(context.Background(), dir, Options{ChunkEvents: 64}); err != nil {
		t.Fatal(err)
	}
	st, err := Open(dir)
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
	s1, err := Build(context.Background(), dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s1.AlreadyBuilt || s1.Records != 1000 {
		t.Fatalf("first build %+v, want 1000 records built", s1)
	}
	if _, err := os.Stat(filepath.Join(dir, rundir.DBDir+".tmp")); !os.IsNotExist(err) {
		t.Errorf("db.tmp left behind: %v", err)
	}
	s2, err := Build(context.Background(), dir, Options{})
	if err != nil || !s2.AlreadyBuilt || s2.Events != s1.Events {
		t.Fatalf("second build %+v %v, want the store found complete", s2, err)
	}
	s3, err := Build(context.Background(), dir, Options{Force: true})
	if err != nil || s3.AlreadyBuilt || s3.Events != s1.Events {
		t.Fatalf("forced build %+v %v, want a rebuild with the same events", s3, err)
	}
	// Two readers at once.
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(dir)
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
	if _, err := Build(ctx, dir, Options{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrNoStore) {
		t.Fatalf("open after a cancelled build: %v, want ErrNoStore", err)
	}
}

func TestStoreTotalsEqualWhatWasRecorded(t *testing.T) {
	_, tot, st := builtRun(t, 5000, 5)
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	var byTok, byAgg correlate.Counters
	for _, tk := range toks {
		byTok.Add(&tk.Counters)
	}
	if err := st.Aggs(func(a *correlate.Agg) error { byAgg.Add(&a.Counters); return nil }); err != nil {
		t.Fatal(err)
	}
	want := correlate.Counters{Faults: tot.faults, Major: tot.major, Minor: tot.faults - tot.major, ReadBytes: tot.readBytes, AddedBytes: tot.added, EvictedBytes: tot.evicted}
	for name, got := range map[string]correlate.Counters{"tokens": byTok, "aggregates": byAgg} {
		if got.Faults != want.Faults || got.Major != want.Major || got.ReadBytes != want.ReadBytes || got.AddedBytes != want.AddedBytes || got.EvictedBytes != want.EvictedBytes {
			t.Errorf("%s sum %+v, want %+v", name, got, want)
		}
	}
	// Every event is stored once.
	var n, bytesAdded uint64
	if err := st.Events(EventFilter{}, func(e *correlate.Event) error {
		n++
		if e.Kind == correlate.KindPageAdd {
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
	st.Events(EventFilter{}, func(e *correlate.Event) error {
		if ids[e.Tensor] {
			all++
		}
		return nil
	})
	st.Events(EventFilter{Tensors: ids}, func(e *correlate.Event) error {
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
	total := func(rows []Row) (c correlate.Counters) {
		for i := range rows {
			c.Add(&rows[i].Counters)
		}
		return c
	}
	all, err := st.Query(Query{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 6 {
		t.Fatalf("got %d token rows, want 6", len(all))
	}
	if all[0].Token != 1 || all[0].Phase != correlate.PhasePrefill || all[1].Phase != correlate.PhaseDecode {
		t.Errorf("first rows %+v %+v, want token 1 prefill then decode", all[0], all[1])
	}
	grand := total(all)
	two := 2
	three := 3
	tests := []struct {
		name  string
		q     Query
		rows  int
		check func(t *testing.T, rows []Row)
	}{
		{"glob over layers, by layer", Query{Tensor: "blk.*.ffn_up_exps.weight", By: "layer"}, synLayers, nil},
		{"by tensor covers everything", Query{By: "tensor"}, 2 * synLayers, func(t *testing.T, rows []Row) {
			if total(rows) != grand {
				t.Errorf("by tensor sums to %+v, want %+v", total(rows), grand)
			}
		}},
		{"one token", Query{Token: &[2]uint32{3, 3}}, 1, func(t *testing.T, rows []Row) {
			if rows[0].Token != 3 {
				t.Errorf("row of token %d", rows[0].Token)
			}
		}},
		{"token range", Query{Token: &[2]uint32{2, 4}}, 3, nil},
		{"layer", Query{Layer: &two, By: "tensor"}, 2, func(t *testing.T, rows []Row) {
			for _, r := range rows {
				if !strings.HasPrefix(r.Key, "blk.2.") {
					t.Errorf("row %s is not of layer 2", r.Key)
				}
			}
		}},
		{"expert", Query{Expert: &three, By: "expert"}, 1, func(t *testing.T, rows []Row) {
			if rows[0].Key != "3" || rows[0].Faults == 0 {
				t.Errorf("row %+v, want expert 3 with faults", rows[0])
			}
		}},
		{"phase", Query{Phase: "prefill", By: "phase"}, 1, nil},
		{"by expert includes dense as -1", Query{By: "expert"}, synExps + 1, nil},
		{"top by faults", Query{By: "tensor", Sort: "faults", Top: 3}, 3, func(t *testing.T, rows []Row) {
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
		q    Query
		want string
	}{
		{"unknown tensor names the closest", Query{Tensor: "blk.1.attn_qq.weight"}, `unknown tensor "blk.1.attn_qq.weight" (closest: blk.1.attn_q.weight`},
		{"glob matching nothing", Query{Tensor: "blk.*.ffn_down.weight"}, "unknown tensor"},
		{"bad glob", Query{Tensor: "blk.[.weight"}, "bad tensor pattern"},
		{"unknown op", Query{Op: "SOFTMAX"}, "unknown op"},
		{"unknown phase", Query{Phase: "warmup"}, "unknown phase"},
		{"unknown group", Query{By: "colour"}, "cannot group by"},
		{"unknown sort", Query{Sort: "speed"}, "cannot sort by"},
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

func TestOpenWithoutAStoreSaysToIngest(t *testing.T) {
	if _, err := Open(t.TempDir()); !errors.Is(err, ErrNoStore) {
		t.Fatalf("got %v, want ErrNoStore", err)
	}
}

// BenchmarkIngest measures the whole build (spool read, decode, attribute,
// badger write) on a synthetic 10-million-event run generated once.
func BenchmarkIngest(b *testing.B) {
	dir := bigRun(b)
	b.ResetTimer()
	var s Summary
	for b.Loop() {
		var err error
		if s, err = Build(context.Background(), dir, Options{Force: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(s.RecordsPerSecond(), "events/s")
}

// BenchmarkQueryTensor is `iocorr query --tensor` end to end: open the
// store read-only, load the dictionaries, run the query, close.
func BenchmarkQueryTensor(b *testing.B) {
	dir := bigRun(b)
	if _, err := Build(context.Background(), dir, Options{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		st, err := Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		rows, err := st.Query(Query{Tensor: "blk.*.ffn_up_exps.weight"})
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

func bigRun(b *testing.B) string {
	if bigDir != "" {
		return bigDir
	}
	dir, err := os.MkdirTemp("", "iocorr-bench-")
	if err != nil {
		b.Fatal(err)
	}
	n := 10_000_000
	if testing.Short() {
		n = 1_000_000
	}
	writeSynthRun(b, dir, n, 1000)
	bigDir = dir
	return dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bigDir != "" {
		os.RemoveAll(bigDir)
	}
	os.Exit(code)
}
