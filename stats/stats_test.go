package stats_test

import (
	"errors"
	"math"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// The scripted run: two MoE layers of four experts; each layer has a
// dense attn_q (two pages) and an ffn_up_exps whose experts are two pages
// each. Token 1 is the prefill; tokens 2–7 decode, the router picking
// layer 0: {0,1} {0,2} {1,2} {0,1} {0,3} {0,1} and layer 1: {2,3} always.
const (
	pg     = kernel.PageSize
	stride = 2 * pg
)

var layer0Picks = [][]int{{0, 1}, {0, 2}, {1, 2}, {0, 1}, {0, 3}, {0, 1}}

type scripted struct {
	meta    *rundir.Meta
	tensors []event.Tensor
	exps    [2]uint32 // tensor ids of the *_exps tensors
}

func scriptedMeta() scripted {
	mf := rundir.ModelFile{Path: "moe.gguf", Dev: 1, Ino: 2}
	off := int64(pg) // page 0 is the header
	for l := range 2 {
		mf.Tensors = append(mf.Tensors,
			rundir.Tensor{Name: []string{"blk.0.attn_q.weight", "blk.1.attn_q.weight"}[l], Offset: off, Size: 2 * pg, Layer: l, Role: "attn_q"},
			rundir.Tensor{Name: []string{"blk.0.ffn_up_exps.weight", "blk.1.ffn_up_exps.weight"}[l], Offset: off + 2*pg, Size: 4 * stride, Layer: l, Role: "ffn_up_exps", Experts: 4, ExpertStride: stride})
		off += 2*pg + 4*stride
	}
	mf.Size, mf.Pages = off, off/pg
	s := scripted{meta: &rundir.Meta{Models: []rundir.ModelFile{mf}, Finished: true, Complete: true,
		// The pagecache tier: its page-cache events are the history replayed.
		Probes: []rundir.Probe{{Kind: "tracepoint", Target: rundir.TracepointPageAdd}}}}
	for i, n := range []string{"[other file]", "[anonymous]", "[model header]"} {
		s.tensors = append(s.tensors, event.Tensor{ID: uint32(i), Name: n, Model: -1, Layer: -1})
	}
	for _, t := range mf.Tensors {
		id := uint32(len(s.tensors))
		s.tensors = append(s.tensors, event.Tensor{ID: id, Name: t.Name, Model: 0, Layer: t.Layer, Role: t.Role,
			Offset: t.Offset, Size: t.Size, Experts: t.Experts, ExpertStride: t.ExpertStride})
		if t.Experts > 0 {
			s.exps[t.Layer] = id
		}
	}
	return s
}

// buildScripted writes the run directory and its store.
func buildScripted(t *testing.T) (string, scripted) {
	dir := t.TempDir()
	s := scriptedMeta()
	res := &event.Result{Tensors: s.tensors, Ops: []string{""}}
	res.Tokens = append(res.Tokens, event.TokenInfo{Token: 1, Phase: event.PhasePrefill, NTokens: 2, StartNS: 1, EndNS: 801})
	for i := range 6 {
		tok := uint32(i + 2)
		ti := event.TokenInfo{Token: tok, Phase: event.PhaseDecode, NTokens: 1, StartNS: uint64(1000 * (i + 1)), EndNS: uint64(1000*(i+1) + 800)}
		ti.ReadBytes, ti.Major, ti.Faults, ti.StallNS = uint64(100*(i+1)), uint64(i+1), uint64(i+1), uint64(10*(i+1))
		res.Tokens = append(res.Tokens, ti)
		for _, e := range layer0Picks[i] {
			res.Experts = append(res.Experts, event.ExpertSel{Token: tok, Layer: 0, Expert: uint16(e), Count: 1})
		}
		for _, e := range []int{2, 3} {
			res.Experts = append(res.Experts, event.ExpertSel{Token: tok, Layer: 1, Expert: uint16(e), Count: 1})
		}
	}
	// The prefill call picked for both of its tokens.
	res.Experts = append([]event.ExpertSel{{Token: 1, Layer: 0, Expert: 0, Count: 2}, {Token: 1, Layer: 0, Expert: 3, Count: 2}}, res.Experts...)
	// Device reads of layer 0's expert 2 in token 3.
	res.Aggs = []event.Agg{{AggKey: event.AggKey{Token: 3, Tensor: s.exps[0], Expert: 2}, Counters: event.Counters{ReadBytes: stride, Faults: 1, Major: 1}}}

	w := storetest.Begin(t, dir, s.tensors, 0)
	defer w.Close()
	page := func(ts uint64, tok uint32, kind event.Kind, expert int, nth int64) {
		e := event.Event{Ts: ts, Token: tok, Kind: kind, Tensor: s.exps[0], Expert: int16(expert),
			Offset: int64(expert)*stride + nth*pg, Bytes: pg, Phase: event.PhaseDecode, Trigger: event.NoTensor}
		if err := w.Event(&e); err != nil {
			t.Fatal(err)
		}
	}
	// Before token 2: experts 0 and 1 of layer 0 whole, expert 2 half.
	page(100, 1, event.KindPageAdd, 0, 0)
	page(101, 1, event.KindPageAdd, 0, 1)
	page(102, 1, event.KindPageAdd, 1, 0)
	page(103, 1, event.KindPageAdd, 1, 1)
	page(104, 1, event.KindPageAdd, 2, 0)
	// In token 2 the first page of expert 1 goes; in token 3 it comes
	// back (a refault) with expert 2's second page. Emitted out of time
	// order, as held-back readahead adds are.
	page(2500, 3, event.KindPageAdd, 2, 1)
	page(2501, 3, event.KindPageAdd, 1, 0)
	page(1500, 2, event.KindPageDel, 1, 0)
	// Two overlapping faults in token 2: 300 ns of wall time stalled. A
	// third, in anonymous memory, is no I/O stall of the model (a run
	// that counted such faults in the kernel has none one by one).
	for _, iv := range [][3]uint64{{1100, 1300, uint64(s.tensors[3].ID)}, {1200, 1400, uint64(s.tensors[3].ID)}, {1500, 1700, uint64(event.TensorAnon)}} {
		e := event.Event{Ts: iv[1], Dur: iv[1] - iv[0], Token: 2, Kind: event.KindFault, Class: event.ClassMajor,
			Tensor: uint32(iv[2]), Phase: event.PhaseDecode, Trigger: event.NoTensor, Expert: -1}
		if err := w.Event(&e); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(res, &store.Summary{Tokens: len(res.Tokens)}); err != nil {
		t.Fatal(err)
	}
	// mincore at the end: header page and the three layer-0 experts.
	e0 := s.tensors[s.exps[0]].Offset / pg
	s.meta.Models[0].ResidentEnd = &rundir.PageMap{Resident: 7, Ranges: [][2]int64{{0, 1}, {e0, e0 + 6}}}
	if err := rundir.WriteMeta(dir, s.meta); err != nil {
		t.Fatal(err)
	}
	return dir, s
}

func computeScripted(t *testing.T, opt stats.Options) (*stats.Report, scripted) {
	dir, s := buildScripted(t)
	run := storetest.OpenRun(t, filepath.Clean(dir))
	rep, err := stats.Compute(run, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep, s
}

// find returns the rows of table name whose column key holds want.
func find(t *testing.T, rep *stats.Report, name string, match map[string]any) map[string]stats.Value {
	t.Helper()
	tb := rep.Table(name)
	if tb == nil {
		t.Fatalf("no table %s", name)
	}
	var found map[string]stats.Value
	err := tb.Each(func(r []stats.Value) error {
		row := map[string]stats.Value{}
		for i, c := range tb.Columns {
			row[c.Name] = r[i]
		}
		for k, v := range match {
			switch v := v.(type) {
			case string:
				if row[k].S != v || row[k].NA != "" {
					return nil
				}
			case int:
				if row[k].I != int64(v) || row[k].NA != "" {
					return nil
				}
			}
		}
		found = row
		return errFound
	})
	if found != nil {
		return found
	}
	if err != nil {
		t.Fatalf("reading table %s: %v", name, err)
	}
	t.Fatalf("table %s has no row %v", name, match)
	return nil
}

// errFound ends a walk over a table's rows at the row sought.
var errFound = errors.New("found")

func TestCacheSimulationOfScriptedPicksMatchesHandWork(t *testing.T) {
	rep, _ := computeScripted(t, stats.Options{K: []int{1, 2, 4}})
	// Layer 0 (12 picks, 4 distinct), worked by hand at K=2:
	// LRU 4 hits, LFU 3, Belady 6. Layer 1 ({2,3} six times): 10 hits
	// at K ≥ 2, none at K=1 (alternating keys always miss).
	for _, c := range []struct {
		policy string
		k      int
		hits   float64
	}{
		{"lru", 2, 4 + 10}, {"lfu", 2, 3 + 10}, {"belady", 2, 6 + 10},
		{"lru", 4, 8 + 10}, {"lfu", 4, 8 + 10}, {"belady", 4, 8 + 10},
		// At K=1 a hit needs the same expert twice in a row: neither
		// layer ever repeats one.
		{"lru", 1, 0}, {"lfu", 1, 0}, {"belady", 1, 0},
	} {
		row := find(t, rep, "cache_sim", map[string]any{"policy": c.policy, "k_experts": c.k})
		if got := row["hit_rate_ratio"].F; got != c.hits/24 {
			t.Errorf("%s K=%d: hit rate %v, want %v/24", c.policy, c.k, got, c.hits)
		}
		misses := 24 - c.hits
		if got := row["bytes_read_per_token_bytes"].F; got != misses*stride/6 {
			t.Errorf("%s K=%d: %v bytes per token, want %v misses × %d B / 6 tokens", c.policy, c.k, got, misses, stride)
		}
	}
	// At K = n_expert only first uses miss.
	for _, p := range []string{"lru", "lfu", "belady"} {
		if got := find(t, rep, "cache_sim", map[string]any{"policy": p, "k_experts": 4})["hit_rate_after_warmup_ratio"].F; got != 1 {
			t.Errorf("%s K=4: %v of the warm picks hit, want all", p, got)
		}
	}
}

func TestRoutingFiguresOfScriptedPicks(t *testing.T) {
	rep, _ := computeScripted(t, stats.Options{})
	// Layer 0 decode counts 5, 4, 2, 1 of 12.
	var h float64
	for _, c := range []float64{5, 4, 2, 1} {
		h -= c / 12 * math.Log2(c/12)
	}
	l0 := find(t, rep, "routing", map[string]any{"layer": 0})
	if got := l0["routing_entropy_bits"].F; math.Abs(got-h) > 1e-12 {
		t.Errorf("layer 0 entropy %v bits, want %v", got, h)
	}
	// Every decode token keeps exactly one of the previous token's two.
	if got := l0["token_overlap_ratio"].F; got != 0.5 {
		t.Errorf("layer 0 overlap %v, want 0.5", got)
	}
	l1 := find(t, rep, "routing", map[string]any{"layer": 1})
	if l1["routing_entropy_bits"].F != 1 || l1["token_overlap_ratio"].F != 1 {
		t.Errorf("layer 1: %v bits, overlap %v; want 1 and 1", l1["routing_entropy_bits"].F, l1["token_overlap_ratio"].F)
	}
	// Real hits, against the scripted page cache at each token's start:
	// layer 0: 2, 1 (expert 2 half resident), 2, 2, 1 (expert 3 never read), 2.
	if got := l0["real_hit_rate_ratio"].F; got != 10.0/12 {
		t.Errorf("layer 0 real hit rate %v, want 10/12", got)
	}
	if got := l1["real_hit_rate_ratio"].F; got != 0 {
		t.Errorf("layer 1 real hit rate %v, want 0", got)
	}
	if got := find(t, rep, "cache_sim", map[string]any{"policy": "real"})["hit_rate_ratio"].F; got != 10.0/24 {
		t.Errorf("real hit rate %v, want 10/24", got)
	}
	// Activations: decode 6 tokens × 2 layers × 2 picks; prefill counts
	// each of its two tokens.
	sum := map[string]int64{}
	for _, r := range rep.Table("expert_activations").Rows {
		sum[r[0].S] += r[3].I
	}
	if sum["decode"] != 24 || sum["prefill"] != 4 {
		t.Errorf("activations %v, want decode 24, prefill 4", sum)
	}
	// Reuse distances: 6 first uses, 14 at distance 1, 4 at distance 2.
	// A first use has no distance: its kind says so, its distance is none.
	for _, c := range []struct {
		kind string
		d    int
		n    int64
		cdf  float64
	}{{stats.ReuseKindFirst, -1, 6, 6.0 / 24}, {stats.ReuseKindReuse, 1, 14, 20.0 / 24}, {stats.ReuseKindReuse, 2, 4, 1}} {
		r := find(t, rep, "reuse_distance", map[string]any{"kind": c.kind, "distance_experts": c.d})
		if r["activations"].I != c.n || r["cdf_ratio"].F != c.cdf {
			t.Errorf("%s at distance %d: %d picks, cdf %v; want %d, %v", c.kind, c.d, r["activations"].I, r["cdf_ratio"].F, c.n, c.cdf)
		}
	}
}

func TestResidencyRefaultsAndTokenFiguresOfScriptedRun(t *testing.T) {
	rep, _ := computeScripted(t, stats.Options{})
	exps := find(t, rep, "tensors", map[string]any{"tensor": "blk.0.ffn_up_exps.weight"})
	for col, want := range map[string]int64{"refault_pages": 1, "resident_end_pages": 6, "resident_end_mincore_pages": 6, "pages": 8} {
		if exps[col].I != want || exps[col].NA != "" {
			t.Errorf("%s = %v (NA %q), want %d", col, exps[col].I, exps[col].NA, want)
		}
	}
	if got := exps["reread_amplification_ratio"].F; got != 1.0/4 {
		t.Errorf("re-read amplification %v, want one expert of four", got)
	}
	if got := exps["readahead_amplification_ratio"].F; got != 2 {
		t.Errorf("readahead amplification %v, want 2 pages read for 1 faulted", got)
	}
	r := find(t, rep, "residency", map[string]any{"token": 3, "tensor": "blk.0.ffn_up_exps.weight"})
	if r["resident_pages"].I != 4 {
		t.Errorf("at token 3's start %d pages resident, want 4 (expert 0, half of 1, half of 2)", r["resident_pages"].I)
	}
	// Decode tokens read 100…600 bytes: nearest-rank p50 is the 3rd.
	d := find(t, rep, "per_token", map[string]any{"phase": "decode"})
	for col, want := range map[string]float64{
		"bytes_read_per_token_mean_bytes": 350, "bytes_read_per_token_p50_bytes": 300,
		"bytes_read_per_token_p90_bytes": 600, "major_faults_per_token_max_count": 6,
		"stall_share_ratio": 300.0 / (6 * 800),
	} {
		if d[col].F != want {
			t.Errorf("%s = %v, want %v", col, d[col].F, want)
		}
	}
	if d["bytes_requested_per_token_p90_bytes"].NA == "" {
		t.Error("bytes requested is not measured but was given a value")
	}
	tpot := find(t, rep, "token_time", map[string]any{"figure": "time_per_output_token"})
	if tpot["time_ns"].F != 800 || tpot["stall_ns"].F != 50 || tpot["compute_ns"].F != 750 {
		t.Errorf("time per output token %v = %v + %v, want 800 = 750 + 50", tpot["time_ns"].F, tpot["compute_ns"].F, tpot["stall_ns"].F)
	}
}

func TestNoTokenResidencyLeavesOutOnlyTheTokenTensorTable(t *testing.T) {
	full, _ := computeScripted(t, stats.Options{})
	short, _ := computeScripted(t, stats.Options{NoTokenResidency: true})
	if full.Table("residency") == nil {
		t.Fatal("the full report has no residency table")
	}
	if short.Table("residency") != nil {
		t.Fatal("NoTokenResidency kept the residency table")
	}
	var kept []stats.Table
	for _, tb := range full.Tables {
		if tb.Name != "residency" {
			kept = append(kept, tb)
		}
	}
	if !reflect.DeepEqual(kept, short.Tables) {
		t.Fatal("NoTokenResidency changed a table other than residency")
	}
}
