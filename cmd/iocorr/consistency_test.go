package main

import (
	"encoding/csv"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/llmtest"
)

// TestRealMoERunIsConsistent reads the shared recorded run (a MoE model
// that does not fit its memory limit, so experts are read from the disk while tokens decode,
// and checks the joins against the raw record: the per-token export adds
// up to what was recorded, and every fault inside an expert tensor of
// layer L during token T lands in an expert the router picked for (T, L)
// — or on a page that readahead brought in.
func TestRealMoERunIsConsistent(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	dir := llmtest.RecordedMoE(t).Dir

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
	// Token 0 is the load, before any llama_decode: no router has run.
	ef := countExpertFaults(t, st, func(tok uint32) bool { return tok > 0 })
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
		if event.PhaseName(tk.Phase) == "decode" {
			decodes++
		}
	}
	if want := decodes * uint64(llmtest.MoE.Layers*llmtest.MoE.ExpertsUsed); picks != want || decodes == 0 {
		t.Errorf("router picks in decode tokens: %d, want %d tokens × %d layers × %d experts = %d", picks, decodes, llmtest.MoE.Layers, llmtest.MoE.ExpertsUsed, want)
	}
	if ef.picked == 0 {
		t.Fatal("no fault in an expert tensor during decoding: the run had no memory pressure")
	}
	t.Logf("expert faults: %d in selected experts, %d on read-ahead pages, %d neither", ef.picked, ef.readAhead, ef.neither)
}

// readCSV parses CSV output and indexes its header.
func readCSV(t *testing.T, out string) ([][]string, map[string]int) {
	t.Helper()
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) == 0 {
		t.Fatalf("bad CSV (%v):\n%s", err, out)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	return rows, col
}
