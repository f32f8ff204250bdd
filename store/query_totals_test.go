package store_test

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// pickStore is a store of an MoE layer pair with the router's picks: a
// dense tensor and an *_exps tensor of 4 experts in layers 0 and 1, the
// load (token 0, which has no row: phase none), a prefill (1), two
// decode tokens (2, 3), and token 4 whose row is missing (a token of no
// llama_decode record), also phase none; an op probe's op on some rows.
func pickStore(t *testing.T) *store.Store {
	t.Helper()
	tensors := append([]event.Tensor(nil), storetest.Pseudos...)
	id := event.FirstTensor
	for l := range 2 {
		tensors = append(tensors,
			event.Tensor{ID: id, Name: "blk." + string(rune('0'+l)) + ".attn_q.weight", Layer: l, Op: 1, Device: "CPU"},
			event.Tensor{ID: id + 1, Name: "blk." + string(rune('0'+l)) + ".ffn_up_exps.weight", Layer: l, Experts: 4, Op: 2})
		id += 2
	}
	toks := []event.TokenInfo{{Token: 1, Phase: event.PhasePrefill, NTokens: 3}, {Token: 2, Phase: event.PhaseDecode, NTokens: 1},
		{Token: 3, Phase: event.PhaseDecode, NTokens: 1}}
	var aggs []event.Agg
	n := uint64(1)
	for tok := range uint32(5) {
		for tensor := uint32(0); tensor < id; tensor++ {
			experts := []int16{-1}
			if tensors[tensor].Experts > 0 {
				experts = []int16{0, 1, 3}
			}
			for _, e := range experts {
				for _, op := range []uint32{0, 3} {
					if (uint64(tok)+uint64(tensor)+uint64(e)+uint64(op))%3 == 0 {
						continue // not every row: some experts only picked
					}
					n++
					aggs = append(aggs, event.Agg{AggKey: event.AggKey{Token: tok, Tensor: tensor, Expert: e, Op: op},
						Counters: event.Counters{Faults: n, Major: n / 2, Minor: n - n/2, StallNS: n * 1000, ReadBytes: n * 4096, BlockReqs: n % 5}})
				}
			}
		}
	}
	var picks []event.ExpertSel
	for tok := uint32(1); tok <= 4; tok++ {
		for layer := range uint16(2) {
			for _, e := range []uint16{1, 2, uint16(tok % 4)} {
				picks = append(picks, event.ExpertSel{Token: tok, Layer: layer, Expert: e, Count: uint64(tok) + uint64(e)})
			}
		}
	}
	// One row per key, as the correlator hands them over.
	seen := map[[3]uint32]bool{}
	var sel []event.ExpertSel
	for _, p := range picks {
		k := [3]uint32{p.Token, uint32(p.Layer), uint32(p.Expert)}
		if !seen[k] {
			seen[k] = true
			sel = append(sel, p)
		}
	}
	return storetest.FromResult(t, event.Result{Tensors: tensors, Ops: []string{"", "MUL_MAT", "MUL_MAT_ID", "GET_ROWS"},
		Tokens: toks, Aggs: aggs, Experts: sel})
}

// A query that selects no tokens apart (no token filter, not by token or
// request) reads the run's totals by phase, not the rows per token: its
// rows are the same query's over every token, which reads those, and
// what summing the rows per token by hand gives; a query of a token range
// reads the rows of those tokens only, and gives that sum too.
func TestQueriesFromTheTotalsAndOfTokenRangesEqualTheRowsPerTokenSummedByHand(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   func(*testing.T) *store.Store
	}{
		{"a store of picks, tokens without a row and probe ops", pickStore},
		{"a synthetic run's ingest", func(t *testing.T) *store.Store {
			_, _, st := builtRun(t, 6000, 6)
			return st
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st(t)
			if n := storetest.CheckQueries(t, st); n < 50 {
				t.Errorf("compared %d queries, want the whole matrix", n)
			}
		})
	}
}
