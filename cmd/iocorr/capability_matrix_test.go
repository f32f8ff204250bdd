package main

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
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/rundir"
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
	{"bpf_loop", bpf.CapLoops}, // before 5.17: page cache per folio, no picks
}

// recordForced records args with the features switched off and checks
// that the run says which path it took. It records the pagecache tier,
// which asks for every kernel capability, so that each fallback runs.
func recordForced(t *testing.T, without, capName string, args ...string) string {
	t.Helper()
	t.Setenv(bpf.WithoutEnv, without)
	dir := filepath.Join(t.TempDir(), "run")
	_, errOut, err := runCmd(t, append([]string{"record", "-o", dir, "--probe", "pagecache"}, args...)...)
	if err != nil {
		t.Fatalf("record without %q: %v\n%s", without, err, errOut)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Capabilities {
		if c.Name == capName && c.Primary {
			t.Fatalf("without %s, %s still took its primary path %q", without, capName, c.Path)
		}
	}
	if without != "" && !strings.Contains(errOut, "kernel") {
		t.Errorf("the summary says nothing of the fallbacks taken:\n%s", errOut)
	}
	return dir
}

// majorBy sums each run's major faults by token, tensor, expert and op,
// and checks them against the child's rusage.
func majorBy(t *testing.T, dir string, realOnly bool) map[string]uint64 {
	t.Helper()
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	out := map[string]uint64{}
	var total uint64
	err = st.Aggs(func(a *event.Agg) error {
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

// TestEachForcedFallbackRecordsTheToucherExactly: the ground-truth toucher
// (cold pages, readahead off) recorded on each forced path gives exactly
// one major fault per touched page on its tensor and expert slice, and as
// many major faults as the child's rusage.
func TestEachForcedFallbackRecordsTheToucherExactly(t *testing.T) {
	requireBPF(t)
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
			dir := recordForced(t, fp.without, fp.cap, "--cold", "--model", model, "--", toucher, "-file", model, "-pages", strings.Join(pages, ","))
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
// layer and expert.
func TestEachForcedFallbackGivesThePrimaryPathsFigures(t *testing.T) {
	requireBPF(t)
	mt := llmtest.BuildMoEToucher(t)
	const layers, experts, used, tokens = 2, 8, 2, 6
	model := llmtest.Model(t, gguf.SynthSpec{Layers: layers, Embd: 256, FF: 512, Heads: 4, Experts: experts, ExpertsUsed: used, Type: llmtest.WeightType})
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	plan := skewedPlan(layers, experts, used, tokens, 3)
	var b strings.Builder
	for l := range layers {
		for _, kind := range []string{"gate", "up", "down"} {
			tn := f.Tensor(fmt.Sprintf("blk.%d.ffn_%s_exps.weight", l, kind))
			lo, hi := tn.ExpertRange(0)
			fmt.Fprintf(&b, "slice %d %d %d\n", l, lo, hi-lo)
		}
	}
	for _, tok := range plan.decode {
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
	for i, tok := range plan.decode {
		for l, ps := range tok {
			for _, e := range ps {
				wantPicks[fmt.Sprintf("token %d layer %d e%d", i, l, e)]++
			}
		}
	}

	var primary map[string]uint64
	for _, fp := range forcedPaths {
		t.Run("without "+fp.without, func(t *testing.T) {
			dir := recordForced(t, fp.without, fp.cap, "--cold", "--probe", "ops,pagecache", "--model", model, "--", mt, model, planFile)
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
			st, err := index.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
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
			if fp.cap == bpf.CapLoops {
				// Without bpf_loop the picks are not recorded: NA, never zeros.
				m, err := rundir.ReadMeta(dir)
				if err != nil {
					t.Fatal(err)
				}
				if len(picks) != 0 || !strings.Contains(m.PicksNA(), "bpf_loop") {
					t.Errorf("without bpf_loop: %d picks recorded, NA reason %q", len(picks), m.PicksNA())
				}
				return
			}
			if d := diffFigures(wantPicks, picks); d != "" {
				t.Errorf("router picks, plan vs recorded:\n%s", d)
			}
		})
	}
}
