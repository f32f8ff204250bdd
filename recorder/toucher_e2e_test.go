package recorder_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// The toucher's ground truth: a program touching known cold pages of a
// model, recorded through the library as `iocorr record` records it.

type slot struct {
	tensor string
	expert int
}

// TestToucherFaultsAreExactPerTensorAndExpert is the ground truth of
// attribution: a program that touches a known list of cold pages with
// readahead off must show exactly those major faults, at exactly those
// file offsets, and the store must charge exactly one fault per page to
// the tensor — and expert slice — that holds it.
func TestToucherFaultsAreExactPerTensorAndExpert(t *testing.T) {
	testenv.RequireBPF(t)
	model, f := rectest.PageableMoE(t)
	checkToucherExact(t, model, f, pageablePicks, false)
}

var pageablePicks = []toucherPick{
	{"blk.0.attn_q.weight", -1, 1},
	{"blk.0.ffn_up_exps.weight", 1, 3},
	{"blk.0.ffn_up_exps.weight", 1, 7},
	{"blk.0.ffn_up_exps.weight", 3, 0},
	{"blk.1.ffn_down_exps.weight", 0, 10},
	{"blk.1.ffn_gate_exps.weight", 2, 20},
	{"output.weight", -1, 2},
}

// TestToucherFaultsAreExactWhileAnotherThreadChangesMappings is the same
// ground truth with a second thread of the toucher mapping and unmapping
// memory all along, as an allocator does: the kernel looks a fault's
// mapping up only if it can take the mmap lock at once, and each fault
// it could not look up is resolved in user space, still exactly, never
// taken for anonymous memory, as a third of them were before (11 of 31 in
// the first run).
func TestToucherFaultsAreExactWhileAnotherThreadChangesMappings(t *testing.T) {
	testenv.RequireBPF(t)
	model, f := rectest.PageableMoE(t)
	// More pages than the plain test: each fault's lookup may or may not
	// meet the lock held, and this test is about those that do. 24 more
	// met it in none of 31 faults in 3 of 4 runs beside a busy machine
	// (two vCPUs: the churning thread seldom ran while the toucher
	// faulted): four experts' 24 pages each give it more chances.
	picks := slices.Clone(pageablePicks)
	for _, expert := range []int{1, 0, 2, 3} {
		for nth := int64(30); nth < 54; nth++ {
			picks = append(picks, toucherPick{"blk.1.ffn_up_exps.weight", expert, nth})
		}
	}
	checkToucherExact(t, model, f, picks, true)
}

// TestToucherFaultsAreExactOnAKQuantModel is the toucher's ground truth
// on gpt-oss quantized to Q4_K_M by llama-quantize: K-quant blocks of 144
// and 210 bytes and expert biases leave expert slices off page
// boundaries, and every touched page is still charged to the tensor and
// expert whose bytes it holds.
func TestToucherFaultsAreExactOnAKQuantModel(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model := llmtest.Quantized(t, llmtest.Model(t, archSpec(gguf.ArchGPTOSS)), "Q4_K_M")
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	checkToucherExact(t, model, f, []toucherPick{
		{"blk.0.attn_q.weight", -1, 1},
		{"blk.0.ffn_up_exps.weight", 1, 3},
		{"blk.0.ffn_up_exps.weight", 1, 7},
		{"blk.0.ffn_up_exps.weight", 15, 0},
		{"blk.3.ffn_down_exps.weight", 0, 10},
		{"blk.2.ffn_gate_exps.weight", 2, 20},
		{"output.weight", -1, 2},
	}, false)
}

// toucherPick is the nth whole page inside a tensor, or inside one expert
// slice of it (expert >= 0).
type toucherPick struct {
	tensor string
	expert int
	nth    int64
}

// checkToucherExact records the toucher touching the picked pages of
// model from a cold cache and checks the record and the store against
// them: exactly those major faults at those offsets, each charged to the
// tensor and expert slice that holds it, with its page's bytes added to
// the page cache there. With churn the toucher changes its mappings from
// another thread meanwhile, and some faults must have found the mmap lock
// held (vma_busy), or the run proved nothing.
func checkToucherExact(t *testing.T, model string, f *gguf.File, picks []toucherPick, churn bool) {
	t.Helper()
	toucher := llmtest.BuildToucher(t)
	// One page inside each chosen slice, never one a tensor shares.
	want := map[slot]int{}
	var pages []string
	for _, pk := range picks {
		tn := f.Tensor(pk.tensor)
		if tn == nil {
			t.Fatalf("no tensor %s", pk.tensor)
		}
		start, end := tn.FileOffset, tn.FileOffset+tn.Size
		if pk.expert >= 0 {
			start, end = tn.ExpertRange(pk.expert)
		}
		first := (start + 4095) / 4096
		p := first + pk.nth
		if (p+1)*4096 > end {
			t.Fatalf("%s expert %d too small for page %d", pk.tensor, pk.expert, pk.nth)
		}
		pages = append(pages, fmt.Sprint(p))
		want[slot{pk.tensor, pk.expert}]++
	}

	dir := filepath.Join(t.TempDir(), "run")
	argv := []string{toucher, "-file", model, "-pages", strings.Join(pages, ",")}
	if churn {
		argv = append(argv, "-churn")
	}
	// The pagecache tier: the pages added are part of the ground truth.
	out := rectest.Record(t, dir, rectest.Options{Cold: true, Probe: "pagecache", Set: func(o *recorder.Options) { o.Models = []string{model} }},
		argv...).Stdout
	var rep struct {
		Mapping uint64  `json:"mapping"`
		Offsets []int64 `json:"offsets"`
		MajFlt  int64   `json:"majflt"`
		Churned int64   `json:"churned"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("toucher said %q: %v", out, err)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	mf := m.Models[0]
	if mf.ResidentBefore != 0 {
		t.Fatalf("--cold left %d pages resident", mf.ResidentBefore)
	}
	// What tracing cost, apart from the command: the recorder's own
	// rusage (here the test binary's, the recorder running in it).
	if r := m.Recorder; r == nil || r.MaxRSSKiB <= 0 || r.UserNS+r.SystemNS <= 0 {
		t.Errorf("meta.json has no recorder rusage: %+v", m.Recorder)
	} else if r.BeforeNS <= 0 || r.WhileNS < 0 || r.BeforeNS+r.WhileNS > r.UserNS+r.SystemNS {
		// Loading the probes always costs CPU before the command runs;
		// both parts lie within the recorder's whole CPU.
		t.Errorf("recorder CPU before the command %d ns, while it ran %d ns, in all %d ns: want a positive start-up and both within the whole",
			r.BeforeNS, r.WhileNS, r.UserNS+r.SystemNS)
	}

	// The record: exactly the touched offsets, each a major fault; one
	// the kernel could not look up has its address in the mapping.
	var got []int64
	busy := 0
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		if uint32(typ) != uint32(wire.EventTypeEV_FAULT) {
			return
		}
		e := (*wire.FaultEvent)(unsafe.Pointer(&rec[0]))
		off := int64(e.FileOff)
		switch {
		case e.Ino == mf.Ino && e.Dev == mf.Dev:
		case e.VmaBusy != 0 && e.Ino == 0 && e.Addr >= rep.Mapping && e.Addr < rep.Mapping+uint64(mf.Size):
			off = int64(e.Addr-rep.Mapping) &^ 4095
			busy++
		default:
			return
		}
		if e.Class != uint8(wire.FaultClassFAULT_MAJOR) {
			t.Errorf("fault at %d is class %d, want major", off, e.Class)
		}
		got = append(got, off)
	})
	if churn {
		t.Logf("%d rounds of mprotect churn while touching; %d of %d faults found the mmap lock held", rep.Churned, busy, len(got))
		if busy == 0 {
			t.Errorf("no fault found the mmap lock held (%d rounds of churn): the run tested nothing the plain one does not", rep.Churned)
		}
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	wantOff := append([]int64(nil), rep.Offsets...)
	sort.Slice(wantOff, func(i, j int) bool { return wantOff[i] < wantOff[j] })
	if fmt.Sprint(got) != fmt.Sprint(wantOff) {
		t.Fatalf("faults at offsets %v, touched %v", got, wantOff)
	}

	// The store: one major fault per touched page, on its tensor and expert.
	st := storetest.Open(t, dir)
	charged, added := map[slot]int{}, map[slot]int{}
	err = st.Aggs(func(a *event.Agg) error {
		k := slot{st.TensorName(a.Tensor), int(a.Expert)}
		if a.Major > 0 {
			charged[k] += int(a.Major)
		}
		if a.AddedBytes > 0 {
			added[k] += int(a.AddedBytes) / 4096
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The toucher's own binary pages may fault too; they land in no model
	// tensor and are left out here.
	for _, m := range []map[slot]int{charged, added} {
		for k := range m {
			if strings.HasPrefix(k.tensor, "[") {
				delete(m, k)
			}
		}
	}
	if fmt.Sprint(sortedSlots(charged)) != fmt.Sprint(sortedSlots(want)) {
		t.Fatalf("major faults charged %v, want %v", sortedSlots(charged), sortedSlots(want))
	}
	if fmt.Sprint(sortedSlots(added)) != fmt.Sprint(sortedSlots(want)) {
		t.Errorf("pages added to the page cache %v, want the touched ones %v", sortedSlots(added), sortedSlots(want))
	}
}

func sortedSlots(m map[slot]int) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s/e%d=%d", k.tensor, k.expert, v))
	}
	sort.Strings(out)
	return out
}
