package store_test

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// requestStore is a store of two tensors and four tokens: 1 of sequence
// 0 alone, 2 of sequences 0 and 1 (3 tokens and 1 in the batch), 3 of
// sequences 0 and 1 whose set is not whole (ids past the read bound), 4
// of sequence 1 alone.
func requestStore(t *testing.T) *store.Store {
	t.Helper()
	var tensors []event.Tensor
	for id, name := range event.PseudoNames {
		tensors = append(tensors, event.Tensor{ID: uint32(id), Name: name, Model: -1, Layer: -1})
	}
	q, up := event.FirstTensor, event.FirstTensor+1
	tensors = append(tensors, event.Tensor{ID: q, Name: "blk.0.attn_q.weight"}, event.Tensor{ID: up, Name: "blk.0.ffn_up.weight"})
	counts := func(ns ...uint16) (a [event.SeqCounted]uint16) {
		copy(a[:], ns)
		return a
	}
	toks := []event.TokenInfo{
		{Token: 1, Phase: event.PhasePrefill, NTokens: 5, Seqs: 0b01, SeqState: event.SeqRead, SeqTokens: counts(5)},
		{Token: 2, Phase: event.PhasePrefill, NTokens: 4, Seqs: 0b11, SeqState: event.SeqRead, SeqTokens: counts(3, 1)},
		{Token: 3, Phase: event.PhaseDecode, NTokens: 2, Seqs: 0b11, SeqState: event.SeqRead | event.SeqPartial, SeqTokens: counts(1, 1)},
		{Token: 4, Phase: event.PhaseDecode, NTokens: 1, Seqs: 0b10, SeqState: event.SeqRead, SeqTokens: counts(0, 1)},
	}
	agg := func(tok, tensor uint32, major, read uint64) event.Agg {
		return event.Agg{AggKey: event.AggKey{Token: tok, Tensor: tensor, Expert: -1}, Counters: event.Counters{Major: major, Faults: major, ReadBytes: read}}
	}
	aggs := []event.Agg{
		agg(1, q, 2, 8192), agg(1, up, 1, 4096),
		// Token 2: 7 major faults and 10 pages over both tensors.
		agg(2, q, 3, 4*4096), agg(2, up, 4, 6*4096),
		agg(3, q, 5, 4096),
		agg(4, up, 1, 4096),
	}
	for i := range toks {
		for _, a := range aggs {
			if a.Token == toks[i].Token {
				toks[i].Counters.Add(&a.Counters)
			}
		}
	}
	dir := t.TempDir()
	w := storetest.Begin(t, dir, tensors, 0)
	defer w.Close()
	if err := w.Commit(&event.Result{Tensors: tensors, Ops: []string{""}, Tokens: toks, Aggs: aggs}, &store.Summary{}); err != nil {
		t.Fatal(err)
	}
	return storetest.Open(t, dir)
}

// TestQueryByRequestSplitsASharedBatchByItsSequencesTokens: token 2's
// batch holds 3 tokens of sequence 0 and 1 of sequence 1, so its 7 major
// faults split 5.25 and 1.75, in whole faults 5 and 2 (the larger
// fraction gets the unit left), and its 40960 bytes 30720 and 10240;
// token 3, whose set is not whole, stays "shared". A tensor filter
// splits what it selects of the token.
func TestQueryByRequestSplitsASharedBatchByItsSequencesTokens(t *testing.T) {
	st := requestStore(t)
	tests := []struct {
		name   string
		q      store.Query
		majors map[string]uint64
		reads  map[string]uint64
	}{
		{"every tensor", store.Query{By: "request"},
			map[string]uint64{"0": 3 + 5, "1": 1 + 2, event.RequestShared: 5},
			map[string]uint64{"0": 12288 + 30720, "1": 4096 + 10240, event.RequestShared: 4096}},
		{"one tensor: token 2's 3 faults split 2.25 and 0.75", store.Query{By: "request", Tensor: "blk.0.attn_q.weight"},
			map[string]uint64{"0": 2 + 2, "1": 1, event.RequestShared: 5},
			map[string]uint64{"0": 8192 + 12288, "1": 4096, event.RequestShared: 4096}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rows, err := st.Query(tc.q)
			if err != nil {
				t.Fatal(err)
			}
			got, gotRead := map[string]uint64{}, map[string]uint64{}
			for _, r := range rows {
				got[r.Key] += r.Major
				gotRead[r.Key] += r.ReadBytes
			}
			for k, v := range tc.majors {
				if got[k] != v || gotRead[k] != tc.reads[k] {
					t.Errorf("request %s: %d major faults and %d bytes read, want %d and %d (rows %+v)", k, got[k], gotRead[k], v, tc.reads[k], rows)
				}
			}
			if len(got) != len(tc.majors) {
				t.Errorf("rows %v, want %v", got, tc.majors)
			}
		})
	}
}
