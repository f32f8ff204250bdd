package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/llmtest"
)

// TestRealMoERunIsConsistent records a MoE model that does not fit its
// memory limit, so experts are read from the disk while tokens decode,
// and checks the joins against the raw record: the per-token export adds
// up to what was recorded, and every fault inside an expert tensor of
// layer L during token T lands in an expert the router picked for (T, L)
// — or on a page that readahead brought in.
func TestRealMoERunIsConsistent(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 8, Embd: 512, FF: 1024, Heads: 8, Experts: 8, ExpertsUsed: 2, Type: llmtest.WeightType})
	dir := filepath.Join(t.TempDir(), "run")
	cmd := llmtest.Command(t.Context(), model, llmtest.Options{Tokens: 6, Threads: 2, JSON: true})
	args := append([]string{"record", "-o", dir, "--cold", "--mem-limit", "112MiB", "--"}, cmd.Args...)
	if _, errOut, err := runCmd(t, args...); err != nil {
		t.Fatalf("record: %v\n%s", err, errOut)
	}

	// What the raw record holds, counted straight from the spool.
	var faults, major, blockReads uint64
	spoolEvents(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(bpf.IocorrEventTypeEV_FAULT):
			e := (*bpf.IocorrFaultEvent)(unsafe.Pointer(&rec[0]))
			if e.Class != uint8(bpf.IocorrFaultClassFAULT_UNACCOUNTED) {
				faults++
				if e.Class == uint8(bpf.IocorrFaultClassFAULT_MAJOR) {
					major++
				}
			}
		case uint32(bpf.IocorrEventTypeEV_BLOCK):
			e := (*bpf.IocorrBlockEvent)(unsafe.Pointer(&rec[0]))
			if kernel.BlockOpOf(e.CmdFlags) == kernel.BlockRead {
				blockReads++
			}
		}
	})

	// The per-token export sums to it.
	out, _, err := runCmd(t, "export", "-i", dir, "faults-per-token", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	rows, col := readCSV(t, out)
	sum := func(name string) uint64 {
		var s uint64
		for _, r := range rows[1:] {
			v, err := strconv.ParseUint(r[col[name]], 10, 64)
			if err != nil {
				t.Fatalf("column %s: %v", name, err)
			}
			s += v
		}
		return s
	}
	if got := sum("faults"); got != faults {
		t.Errorf("faults-per-token sums to %d faults, the record has %d", got, faults)
	}
	if got := sum("major_faults"); got != major {
		t.Errorf("faults-per-token sums to %d major faults, the record has %d", got, major)
	}
	if sum("major_faults")+sum("minor_faults") != sum("faults") {
		t.Error("major + minor != faults")
	}
	if got := sum("block_requests"); got > blockReads {
		t.Errorf("faults-per-token counts %d block requests, the record has %d reads", got, blockReads)
	}

	// Faults in expert slices fall in selected experts.
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	selected := map[[3]uint32]bool{} // token, layer, expert
	if err := st.ExpertSelections(func(s correlate.ExpertSel) error {
		selected[[3]uint32{s.Token, uint32(s.Layer), uint32(s.Expert)}] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(selected) == 0 {
		t.Fatal("no expert selections recorded")
	}
	exps := map[uint32]bool{}
	for _, tn := range st.Tensors {
		if strings.HasSuffix(tn.Role, "_exps") {
			exps[tn.ID] = true
		}
	}
	readAhead := map[[2]int64]bool{} // tensor, page within it, brought in by readahead
	var inSelected, notSelected, onReadahead uint64
	var pending []correlate.Event
	err = st.Events(index.EventFilter{Tensors: exps}, func(e *correlate.Event) error {
		switch e.Kind {
		case correlate.KindPageAdd:
			if e.Trigger != correlate.NoTensor {
				readAhead[[2]int64{int64(e.Tensor), e.Offset / 4096}] = true
			}
		case correlate.KindFault:
			if e.Token > 0 {
				pending = append(pending, *e)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range pending {
		layer := uint32(st.Tensors[e.Tensor].Layer)
		switch {
		case selected[[3]uint32{e.Token, layer, uint32(e.Expert)}]:
			inSelected++
		case readAhead[[2]int64{int64(e.Tensor), e.Offset / 4096}]:
			onReadahead++
		default:
			notSelected++
			if notSelected <= 5 {
				t.Errorf("fault in %s expert %d at token %d, not selected for layer %d and not read ahead",
					st.TensorName(e.Tensor), e.Expert, e.Token, layer)
			}
		}
	}
	// Each decoded token picks ExpertsUsed experts in every layer, and the
	// per-expert query counts exactly those picks.
	qrows, err := st.Query(index.Query{Tensor: "blk.*.ffn_down_exps.weight", By: "expert", Phase: "decode"})
	if err != nil {
		t.Fatal(err)
	}
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	var picks, decodes uint64
	for _, r := range qrows {
		picks += r.Selected
	}
	for _, tk := range toks {
		if correlate.PhaseName(tk.Phase) == "decode" {
			decodes++
		}
	}
	if want := decodes * 8 * 2; picks != want || decodes == 0 {
		t.Errorf("router picks in decode tokens: %d, want %d tokens × 8 layers × 2 experts = %d", picks, decodes, want)
	}
	if inSelected == 0 {
		t.Fatal("no fault in an expert tensor during decoding: the run had no memory pressure")
	}
	t.Logf("expert faults: %d in selected experts, %d on read-ahead pages, %d neither", inSelected, onReadahead, notSelected)
}
