package rectest

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// The checks the end-to-end tests of an MoE run share: each reads a run
// (its spool or its store) and holds it to the model and the router.

// CountExpertFaults counts where the faults in expert tensors of the tokens
// keep accepts landed: in an expert the router picked for that token and
// layer, on a page readahead brought in, or neither — each of those an
// error (the first five named). Read-ahead pages are known only from a
// run of the pagecache tier (its page adds).
type ExpertFaults struct{ Picked, ReadAhead, Neither int }

func CountExpertFaults(t testing.TB, st *store.Store, keep func(token uint32) bool) ExpertFaults {
	t.Helper()
	selected := map[[3]uint32]bool{} // token, layer, expert
	if err := st.ExpertSelections(func(s event.ExpertSel) error {
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
	var faults []event.Event
	if err := st.Events(store.EventFilter{Tensors: exps}, func(e *event.Event) error {
		switch e.Kind {
		case event.KindPageAdd:
			if e.Trigger != event.NoTensor {
				readAhead[[2]int64{int64(e.Tensor), e.Offset / 4096}] = true
			}
		case event.KindFault:
			if keep(e.Token) {
				faults = append(faults, *e)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var n ExpertFaults
	for _, e := range faults {
		layer := uint32(st.Tensors[e.Tensor].Layer)
		switch {
		case selected[[3]uint32{e.Token, layer, uint32(e.Expert)}]:
			n.Picked++
		case readAhead[[2]int64{int64(e.Tensor), e.Offset / 4096}]:
			n.ReadAhead++
		default:
			n.Neither++
			if n.Neither <= 5 {
				t.Errorf("fault in %s expert %d at token %d, not picked for layer %d and not read ahead",
					st.TensorName(e.Tensor), e.Expert, e.Token, layer)
			}
		}
	}
	return n
}

// CountDecodeCalls counts the llama_decode calls of a run's spool by
// phase (a call of more than one token is the prefill) and checks every
// graph node's weight offset against f (spooltest.CheckWeightOffset), marking the
// weights read in weights, when set. Every other record goes to more, when set.
func CountDecodeCalls(t testing.TB, dir string, f *gguf.File, weights map[string]bool, more func(typ uint16, rec []byte)) (prefill, decode int) {
	t.Helper()
	if weights == nil {
		weights = map[string]bool{}
	}
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_DECODE_BEGIN):
			if spooltest.Decoded(t, rec).Decode().N_tokens > 1 {
				prefill++
			} else {
				decode++
			}
		case uint32(wire.EventTypeEV_NODE):
			spooltest.CheckWeightOffset(t, f, spooltest.Decoded(t, rec).Node(), weights)
		}
		if more != nil {
			more(typ, rec)
		}
	})
	return prefill, decode
}

// CheckLayerWeightsRead checks that a graph node read every layer tensor
// (blk.*) of f.
func CheckLayerWeightsRead(t testing.TB, f *gguf.File, weights map[string]bool) {
	t.Helper()
	for _, tensor := range f.Tensors {
		if strings.HasPrefix(tensor.Name, "blk.") && !weights[tensor.Name] {
			t.Errorf("no graph node reads %s", tensor.Name)
		}
	}
}

// DecodePicks returns the decode tokens of a run's store and how many
// distinct router picks (token, layer, expert) were made in them.
func DecodePicks(t testing.TB, st *store.Store) (decodeTok map[uint32]bool, picks int) {
	t.Helper()
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	decodeTok = map[uint32]bool{}
	for _, tk := range toks {
		if event.PhaseName(tk.Phase) == "decode" {
			decodeTok[tk.Token] = true
		}
	}
	seen := map[[3]uint32]bool{} // token, layer, expert
	if err := st.ExpertSelections(func(s event.ExpertSel) error {
		k := [3]uint32{s.Token, uint32(s.Layer), uint32(s.Expert)}
		if decodeTok[s.Token] && !seen[k] {
			picks++
		}
		seen[k] = true
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return decodeTok, picks
}

// RecordableMoE is what the end-to-end tests of an MoE run start from:
// tracing and real llama.cpp available, llmtest.MoE written, and its
// tensor table.
func RecordableMoE(t testing.TB) (model string, f *gguf.File) {
	t.Helper()
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model = llmtest.Model(t, llmtest.MoE)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	return model, f
}

// PageableMoE writes llmtest.PageableMoE and returns it with its tensor
// table.
func PageableMoE(t testing.TB) (string, *gguf.File) {
	t.Helper()
	model := llmtest.Model(t, llmtest.PageableMoE)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	return model, f
}
