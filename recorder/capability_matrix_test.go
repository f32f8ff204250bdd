package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// forcedPaths are the fallbacks this kernel (x86-64, 6.18, every primary
// path) can be made to take, by switching the feature off as a kernel
// without it would have it: each is recorded and compared with the
// primary paths.
var forcedPaths = []struct {
	without string
	cap     string
}{
	{"", ""},
	{"page_fault_user", bpf.CapFaults},               // arm64: no exceptions tracepoints
	{"bpf_find_vma", bpf.CapOffsets},                 // before 5.17
	{"page_fault_user,bpf_find_vma", bpf.CapOffsets}, // arm64 on 5.15 (Jetson)
	{"readahead", bpf.CapReadahead},                  // before 6.18
	{"uprobe_multi", bpf.CapOps},                     // before 6.6
	{"page_fault_user,bpf_find_vma,readahead,uprobe_multi", bpf.CapFaults},
	{"bpf_loop", bpf.CapLoops}, // before 5.17: bounded loops, page cache per folio
}

// recordForced records argv with the features switched off, ingests the
// run and checks that it says which path it took. It records the
// pagecache tier, which asks for every kernel capability, so that each
// fallback runs.
func recordForced(t *testing.T, without, capName string, set func(o *Options), argv ...string) string {
	t.Helper()
	t.Setenv(bpf.WithoutEnv, without)
	dir := filepath.Join(t.TempDir(), "run")
	o, errOut := cliOptions(dir, argv...)
	o.Probes.PageCache = true
	set(&o)
	if _, err := Run(t.Context(), o); err != nil {
		t.Fatalf("record without %q: %v\n%s", without, err, errOut)
	}
	if _, err := pipeline.Ingest(t.Context(), dir, pipeline.Options{}); err != nil {
		t.Fatalf("ingest without %q: %v", without, err)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	for _, c := range m.Capabilities {
		if c.Name == capName && c.Primary {
			t.Fatalf("without %s, %s still took its primary path %q", without, capName, c.Path)
		}
		off = off || c.Name == capName && c.Off
	}
	// What every output's summary says of the kernel (record's "kernel"
	// lines) names the fallback taken, unless the run did not ask for the
	// capability (op probes without --probe ops).
	if notes := strings.Join(m.CapabilityNotes(), "\n"); without != "" && !off && !strings.Contains(notes, capName+": ") {
		t.Errorf("the run's capability notes say nothing of %s:\n%s", capName, notes)
	}
	return dir
}

// majorBy sums each run's major faults by token, tensor, expert and op,
// and checks them against the child's rusage.
func majorBy(t *testing.T, dir string, realOnly bool) map[string]uint64 {
	t.Helper()
	run := storetest.OpenRun(t, dir)
	st, m := run.Store, run.Meta
	out := map[string]uint64{}
	var total uint64
	err := st.Aggs(func(a *event.Agg) error {
		total += a.Major
		name := st.TensorName(a.Tensor)
		if a.Major == 0 || realOnly && strings.HasPrefix(name, "[") {
			return nil
		}
		out[fmt.Sprintf("token %d %s e%d %s", a.Token, name, a.Expert, st.OpName(a.Op))] += a.Major
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if total != uint64(m.Child.MajFlt) {
		t.Errorf("%d major faults recorded, the child's rusage says %d", total, m.Child.MajFlt)
	}
	return out
}

func diffFigures(a, b map[string]uint64) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, fmt.Sprintf("%s: %d vs %d", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: 0 vs %d", k, v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// pageableMoE writes a 2-layer model of 4 experts (2 used) and returns it
// with its tensor table: each expert slice of an *_exps tensor is
// 256×512×2 B = 64 pages, so pages and byte ranges can be picked inside
// chosen experts.
func pageableMoE(t *testing.T) (string, *gguf.File) {
	t.Helper()
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType})
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	return model, f
}

// skewedPicks is a scripted router's picks, by token and layer: `used`
// distinct experts per layer and token, ascending, the low ids far more
// often, as a trained router's hot experts are.
func skewedPicks(layers, experts, used, tokens int, seed uint64) [][][]int {
	pick := llmtest.SkewedPicks(experts, used, seed)
	var out [][][]int
	for range tokens {
		var tok [][]int
		for range layers {
			tok = append(tok, pick())
		}
		out = append(out, tok)
	}
	return out
}

// TestEachForcedFallbackRecordsTheToucherExactly: the ground-truth toucher
// (cold pages, readahead off) recorded on each forced path gives exactly
// one major fault per touched page on its tensor and expert slice, and as
// many major faults as the child's rusage.
func TestEachForcedFallbackRecordsTheToucherExactly(t *testing.T) {
	testenv.RequireBPF(t)
	toucher := llmtest.BuildToucher(t)
	model, f := pageableMoE(t)
	want := map[string]uint64{}
	var pages []string
	for _, p := range []struct {
		name   string
		expert int
		nth    int64
	}{{"blk.0.attn_q.weight", -1, 1}, {"blk.0.ffn_up_exps.weight", 1, 3}, {"blk.1.ffn_down_exps.weight", 0, 10}, {"output.weight", -1, 2}} {
		tn := f.Tensor(p.name)
		start, end := tn.FileOffset, tn.FileOffset+tn.Size
		if p.expert >= 0 {
			start, end = tn.ExpertRange(p.expert)
		}
		page := (start+4095)/4096 + p.nth
		if (page+1)*4096 > end {
			t.Fatalf("%s expert %d too small for page %d", p.name, p.expert, p.nth)
		}
		pages = append(pages, fmt.Sprint(page))
		want[fmt.Sprintf("token 0 %s e%d %s", p.name, p.expert, "")]++
	}
	for _, fp := range forcedPaths {
		t.Run("without "+fp.without, func(t *testing.T) {
			dir := recordForced(t, fp.without, fp.cap, func(o *Options) { o.Cold, o.Models = true, []string{model} },
				toucher, "-file", model, "-pages", strings.Join(pages, ","))
			if d := diffFigures(want, majorBy(t, dir, true)); d != "" {
				t.Errorf("major faults by tensor and expert, touched vs recorded:\n%s", d)
			}
		})
	}
}

// TestEachForcedFallbackGivesThePrimaryPathsFigures: a scripted MoE router
// (llama_decode and get_rows, the probe points of llama.cpp, op probes
// on) recorded on each forced path gives the primary paths' major faults
// per token, tensor, expert and op, and the same router picks per token,
// layer and expert (without bpf_loop too: its bounded loop reads them).
func TestEachForcedFallbackGivesThePrimaryPathsFigures(t *testing.T) {
	testenv.RequireBPF(t)
	mt := llmtest.BuildMoEToucher(t)
	const layers, experts, used, tokens = 2, 8, 2, 6
	model := llmtest.Model(t, gguf.SynthSpec{Layers: layers, Embd: 256, FF: 512, Heads: 4, Experts: experts, ExpertsUsed: used, Type: llmtest.WeightType})
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	plan := skewedPicks(layers, experts, used, tokens, 3)
	var b strings.Builder
	for l := range layers {
		for _, kind := range []string{"gate", "up", "down"} {
			tn := f.Tensor(fmt.Sprintf("blk.%d.ffn_%s_exps.weight", l, kind))
			lo, hi := tn.ExpertRange(0)
			fmt.Fprintf(&b, "slice %d %d %d\n", l, lo, hi-lo)
		}
	}
	for _, tok := range plan {
		b.WriteString("token 1")
		for l, ps := range tok {
			fmt.Fprintf(&b, " %d:%s", l, strings.Trim(strings.Join(strings.Fields(fmt.Sprint(ps)), ","), "[]"))
		}
		b.WriteString("\n")
	}
	planFile := filepath.Join(t.TempDir(), "plan")
	if err := os.WriteFile(planFile, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	wantPicks := map[string]uint64{}
	for i, tok := range plan {
		for l, ps := range tok {
			for _, e := range ps {
				wantPicks[fmt.Sprintf("token %d layer %d e%d", i, l, e)]++
			}
		}
	}

	var primary map[string]uint64
	for _, fp := range forcedPaths {
		t.Run("without "+fp.without, func(t *testing.T) {
			dir := recordForced(t, fp.without, fp.cap, func(o *Options) { o.Cold, o.Probes.Ops, o.Models = true, true, []string{model} }, mt, model, planFile)
			// Model tensors only: a page of a library or of the program
			// itself may be cold in one run and cached in the next, and
			// outside a mapping seen the user-space fallback cannot name
			// the file; rusage still checks every fault was recorded.
			got := majorBy(t, dir, true)
			if len(got) == 0 {
				t.Fatal("no major fault recorded")
			}
			var sum uint64
			for _, v := range got {
				sum += v
			}
			t.Logf("without %q: %d major faults over %d (token, tensor, expert, op) keys", fp.without, sum, len(got))
			if primary == nil {
				primary = got
			} else if d := diffFigures(primary, got); d != "" {
				t.Errorf("major faults by token, tensor, expert and op, primary vs without %s:\n%s", fp.without, d)
			}
			st := storetest.Open(t, dir)
			var sels []event.ExpertSel
			if err := st.ExpertSelections(func(s event.ExpertSel) error { sels = append(sels, s); return nil }); err != nil {
				t.Fatal(err)
			}
			first := ^uint32(0)
			for _, s := range sels {
				first = min(first, s.Token)
			}
			picks := map[string]uint64{}
			for _, s := range sels {
				picks[fmt.Sprintf("token %d layer %d e%d", s.Token-first, s.Layer, s.Expert)] += s.Count
			}
			if d := diffFigures(wantPicks, picks); d != "" {
				t.Errorf("router picks, plan vs recorded:\n%s", d)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			if why := m.PicksNA(); why != "" || m.LoopsCut != nil {
				t.Errorf("picks NA %q, loops cut %+v: every row was read", why, m.LoopsCut)
			}
		})
	}
}

// graphFigures are what a run of llama.cpp recorded of its graphs and
// picks: weight-reading nodes (index, node, weight, source slot, op) with
// how many graphs had each, and the router's picks by decode call, layer
// node and expert.
func graphFigures(t *testing.T, dir string) (nodes, picks map[string]uint64) {
	t.Helper()
	nodes, picks = map[string]uint64{}, map[string]uint64{}
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_NODE):
			e := spooltest.Decoded(t, rec).Node()
			nodes[fmt.Sprintf("node %d %s reads %s (src %d, op %d)", e.NodeIdx, wire.CString(e.NodeName[:]), wire.CString(e.WeightName[:]), e.SrcSlot, e.Op)]++
		case uint32(wire.EventTypeEV_EXPERTS):
			e := spooltest.Decoded(t, rec).Experts()
			for i, id := range e.Ids[:e.Count] {
				row := (e.First + uint32(i)) / e.N_used
				picks[fmt.Sprintf("call %d %s row %d e%d", e.Hdr.Token, wire.CString(e.Name[:]), row, id)]++
			}
		}
	})
	return nodes, picks
}

// Without bpf_loop (before 5.17) the graph walk and the expert picks of a
// real llama.cpp take the bounded loops, and record what bpf_loop
// records: the same weight nodes of every graph and the same picks per
// decode call, layer, token row and expert; nothing is cut.
func TestBoundedLoopsRecordWhatBpfLoopRecords(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 3, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType})
	var nodes, picks [2]map[string]uint64
	for i, without := range []string{"", "bpf_loop"} {
		t.Setenv(bpf.WithoutEnv, without)
		dir, _, summary := recordDriver(t, model, llmtest.Generation{Tokens: 6, Threads: 1}, func(o *Options) {})
		m, err := rundir.ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		spooltest.CheckNothingLost(t, m.Lost)
		loops := m.Capabilities[slices.IndexFunc(m.Capabilities, func(c rundir.Capability) bool { return c.Name == bpf.CapLoops })]
		if loops.Primary != (without == "") {
			t.Fatalf("without %q the loops took %q", without, loops.Path)
		}
		if m.LoopsCut != nil || m.PicksNA() != "" {
			t.Errorf("without %q: loops cut %+v, picks NA %q\n%s", without, m.LoopsCut, m.PicksNA(), summary)
		}
		nodes[i], picks[i] = graphFigures(t, dir)
		if len(nodes[i]) == 0 || len(picks[i]) == 0 {
			t.Fatalf("without %q: %d weight nodes and %d picks recorded", without, len(nodes[i]), len(picks[i]))
		}
		t.Logf("without %q: %d weight nodes, %d picks", without, len(nodes[i]), len(picks[i]))
	}
	if d := diffFigures(nodes[0], nodes[1]); d != "" {
		t.Errorf("graph weight nodes, bpf_loop vs bounded loops:\n%s", d)
	}
	if d := diffFigures(picks[0], picks[1]); d != "" {
		t.Errorf("router picks, bpf_loop vs bounded loops:\n%s", d)
	}
}

// graphWalk is what a run recorded of one graph (by its fingerprint):
// its size, how often it was computed and its weight nodes.
type graphWalk struct {
	nodes, computed uint32
	maxIdx          int64
	weights         map[string]uint64
}

func graphWalks(t *testing.T, dir string) map[uint64]*graphWalk {
	t.Helper()
	out := map[uint64]*graphWalk{}
	get := func(id uint64) *graphWalk {
		if out[id] == nil {
			out[id] = &graphWalk{maxIdx: -1, weights: map[string]uint64{}}
		}
		return out[id]
	}
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_GRAPH):
			e := spooltest.Decoded(t, rec).Graph()
			g := get(e.GraphId)
			g.nodes = e.N_nodes
			g.computed++
		case uint32(wire.EventTypeEV_NODE):
			e := spooltest.Decoded(t, rec).Node()
			g := get(e.GraphId)
			g.maxIdx = max(g.maxIdx, int64(e.NodeIdx))
			g.weights[fmt.Sprintf("node %d %s reads %s (src %d)", e.NodeIdx, wire.CString(e.NodeName[:]), wire.CString(e.WeightName[:]), e.SrcSlot)]++
		}
	})
	return out
}

// A graph larger than the bounded loop's GraphWalkBound nodes is walked
// over its next computations: a graph computed k times has its first
// k×GraphWalkBound nodes walked (in order, as bpf_loop walks them at
// once) and the rest counted as cut, exactly; a graph walked whole has
// the weight nodes bpf_loop records of a graph of its size.
func TestABoundedGraphWalkGoesOnAtTheNextComputationAndCountsTheRest(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	// Many small layers: some 30 nodes each, well past the bound.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 48, Embd: 64, FF: 128, Heads: 2, Type: llmtest.WeightType})
	var runs [3]map[uint64]*graphWalk
	for i, tc := range []struct {
		without string
		tokens  int
	}{{"", 4}, {"bpf_loop", 4}, {"bpf_loop", 1}} {
		without := tc.without
		t.Setenv(bpf.WithoutEnv, without)
		dir, _, summary := recordDriver(t, model, llmtest.Generation{Tokens: tc.tokens, Threads: 1}, func(o *Options) {})
		m, err := rundir.ReadMeta(dir)
		if err != nil {
			t.Fatal(err)
		}
		spooltest.CheckNothingLost(t, m.Lost)
		runs[i] = graphWalks(t, dir)
		var wantCut uint64
		large := 0
		for id, g := range runs[i] {
			walked := g.nodes
			if without != "" {
				walked = min(g.nodes, bpf.GraphWalkBound*g.computed)
			}
			wantCut += uint64(g.nodes - walked)
			if g.maxIdx >= int64(walked) {
				t.Errorf("without %q: graph %x of %d nodes computed %d times has a weight node at %d, past the %d walked", without, id, g.nodes, g.computed, g.maxIdx, walked)
			}
			if g.nodes > bpf.GraphWalkBound {
				large++
			}
		}
		if large == 0 {
			t.Fatalf("no graph has more than %d nodes: the test model is too small", bpf.GraphWalkBound)
		}
		var gotCut uint64
		if m.LoopsCut != nil {
			gotCut = m.LoopsCut.GraphNodes
		}
		if gotCut != wantCut {
			t.Errorf("without %q: %d graph nodes counted as cut, the graphs' sizes and computations say %d\n%s", without, gotCut, wantCut, summary)
		}
		t.Logf("without %q, %d tokens: %d graphs (%d of more than %d nodes), %d nodes cut", without, tc.tokens, len(runs[i]), large, bpf.GraphWalkBound, gotCut)
		if i == 2 && gotCut == 0 {
			t.Errorf("one token: every graph was computed often enough to be walked whole, so the count of the cut was not tested")
		}
	}
	// Graph fingerprints hold addresses, so graphs are matched by size.
	bySize := map[uint32]map[string]uint64{}
	for _, g := range runs[0] {
		bySize[g.nodes] = g.weights
	}
	whole := 0
	for id, g := range runs[1] {
		if g.nodes > bpf.GraphWalkBound*g.computed {
			continue
		}
		whole++
		want, ok := bySize[g.nodes]
		if !ok {
			t.Errorf("graph %x of %d nodes: bpf_loop's run has no graph of that size", id, g.nodes)
			continue
		}
		if d := diffFigures(want, g.weights); d != "" {
			t.Errorf("graph %x of %d nodes, weight nodes of bpf_loop vs the bounded walk:\n%s", id, g.nodes, d)
		}
	}
	if whole == 0 {
		t.Error("no graph was walked whole by the bounded loop")
	}
}

// Anonymous memory that reuses a range of the model the command unmapped
// (llama.cpp unmaps what of a model went to a GPU, and a compute buffer
// may land there) is not the model's, on every path: where ingest
// resolves the faults from the mappings it knows (no bpf_find_vma), the
// munmap call makes the range a hole, newer than the snapshot that showed
// the model there. The toucher's faults on the model are the model's,
// exactly, and its writes at the same addresses after none of them.
func TestAnonymousMemoryReusingAnUnmappedModelRangeIsNotTheModels(t *testing.T) {
	testenv.RequireBPF(t)
	toucher := llmtest.BuildToucher(t)
	model, f := pageableMoE(t)
	var pages []string
	for _, name := range []string{"blk.0.attn_q.weight", "blk.0.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight", "output.weight"} {
		pages = append(pages, fmt.Sprint(f.Tensor(name).FileOffset/4096+2))
	}
	for _, fp := range []struct{ without, cap string }{{"", ""}, {"bpf_find_vma", bpf.CapOffsets}} {
		t.Run("without "+fp.without, func(t *testing.T) {
			dir := recordForced(t, fp.without, fp.cap, func(o *Options) { o.Cold, o.Models = true, []string{model} },
				toucher, "-file", model, "-pages", strings.Join(pages, ","), "-reuse")
			run := storetest.OpenRun(t, dir)
			var onModel, anon uint64
			err := run.Store.Aggs(func(a *event.Agg) error {
				switch {
				case a.Tensor == event.TensorAnon:
					anon += a.Faults
				case !strings.HasPrefix(run.Store.TensorName(a.Tensor), "["):
					onModel += a.Faults
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if onModel != uint64(len(pages)) || anon < uint64(len(pages)) {
				t.Errorf("%d faults on the model's tensors and %d anonymous; want the %d touched and at least the %d written after", onModel, anon, len(pages), len(pages))
			}
		})
	}
}
