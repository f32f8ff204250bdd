//go:build linux

package pipeline_test

import (
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestRealMoERunIsConsistent reads the shared recorded run (a MoE model
// that does not fit its memory limit, so experts are read from the disk while tokens decode,
// and checks the joins of the ingest against the raw record: the per-token
// figures add up to what was recorded, and every fault inside an expert tensor of
// layer L during token T lands in an expert the router picked for (T, L)
// — or on a page that readahead brought in.
func TestRealMoERunIsConsistent(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	dir := llmtest.RecordedMoE(t).Dir

	// What the raw record holds, counted straight from the spool.
	var faults, major, blockReads uint64
	spooltest.Faults(t, dir, func(_ *wire.EventHdr, class uint8, n uint64, _ *wire.FaultEvent) {
		if class != uint8(wire.FaultClassFAULT_UNACCOUNTED) {
			faults += n
			if class == uint8(wire.FaultClassFAULT_MAJOR) {
				major += n
			}
		}
	})
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_BLOCK):
			e := (*wire.BlockEvent)(unsafe.Pointer(&rec[0]))
			if kernel.BlockOpOf(e.CmdFlags) == kernel.BlockRead {
				blockReads++
			}
		}
	})

	// The per-token figures (what `export faults-per-token` writes) sum
	// to it.
	st := storetest.Open(t, dir)
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	sum := func(name string) uint64 {
		d, ok := event.CounterByName(name)
		if !ok {
			t.Fatalf("no counter %s", name)
		}
		var s uint64
		for i := range toks {
			s += *d.Field(&toks[i].Counters)
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
	// Token 0 is the load, before any llama_decode: no router has run.
	ef := rectest.CountExpertFaults(t, st, func(tok uint32) bool { return tok > 0 })
	// Each decoded token picks ExpertsUsed experts in every layer, and the
	// per-expert query counts exactly those picks.
	qrows, err := st.Query(store.Query{Tensor: "blk.*.ffn_down_exps.weight", By: "expert", Phase: "decode"})
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
	if ef.Picked == 0 {
		t.Fatal("no fault in an expert tensor during decoding: the run had no memory pressure")
	}
	t.Logf("expert faults: %d in selected experts, %d on read-ahead pages, %d neither", ef.Picked, ef.ReadAhead, ef.Neither)
}
