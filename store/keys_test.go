package store

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
)

func TestChunksRoundTripEveryFieldAtItsLimits(t *testing.T) {
	evs := []event.Event{
		{Ts: 1, Req: 2, Kind: event.KindFault, Phase: 2, Class: 2, Tensor: 3, Expert: -1, Token: 5, Tid: 9, Trigger: event.NoTensor, Offset: 4096, Bytes: 4096, Dur: 77},
		// a kernel address as an offset, the largest values, tokens, tids and request ids going down
		{Ts: 1, Req: math.MaxUint32, Kind: event.KindPageAdd, Phase: 1, Tensor: math.MaxUint32 - 1, Expert: math.MaxInt16 - 1, Token: 0, Op: math.MaxUint32,
			Tid: 0, Trigger: 0, Offset: math.MinInt64, Bytes: math.MaxUint64, Dur: math.MaxUint64},
		{Ts: math.MaxUint64, Req: 1, Kind: event.KindBlock, Class: 1, Token: math.MaxUint32, Tid: math.MaxUint32, Trigger: 7, Offset: math.MaxInt64},
		{Ts: math.MaxUint64, Req: 0, Kind: event.KindRead, Class: 5, Tensor: 4, Bytes: 1},
	}
	v := appendChunk(nil, evs)
	r, err := newChunkReader(v)
	if err != nil {
		t.Fatal(err)
	}
	var got []event.Event
	var e event.Event
	for r.next(&e) {
		got = append(got, e)
	}
	if r.err != nil || len(got) != len(evs) {
		t.Fatalf("decoded %d events (%v), want %d", len(got), r.err, len(evs))
	}
	for i := range evs {
		if got[i] != evs[i] {
			t.Errorf("event %d: got %+v, want %+v", i, got[i], evs[i])
		}
	}
}

func TestDamagedChunksAreErrorsNotPanics(t *testing.T) {
	v := appendChunk(nil, []event.Event{{Ts: 5, Tensor: 3, Bytes: 4096}, {Ts: 9, Tensor: 4, Bytes: 4096}})
	for cut := range len(v) {
		r, err := newChunkReader(v[:cut])
		if err != nil {
			continue
		}
		var e event.Event
		n := 0
		for r.next(&e) {
			n++
		}
		if r.err == nil && n == 2 {
			t.Errorf("chunk cut to %d of %d bytes decoded whole", cut, len(v))
		}
	}
	if _, err := newChunkReader([]byte{9, 1, 0}); err == nil {
		t.Error("unknown chunk encoding accepted")
	}
}

// Timeline marks come back as they went in, every field at its limits,
// times going back as well as forward (spool order is per CPU).
func TestTimelineChunksRoundTripEveryFieldAtItsLimits(t *testing.T) {
	ms := []event.Mark{
		{Ts: 100, Kind: event.MarkThread, Tid: 7, Tgid: 5},
		{Ts: 99, Kind: event.MarkExec, Tgid: 5, Name: "llama-cli"},
		{Ts: math.MaxUint64, Kind: event.MarkDecodeEnd, Tid: math.MaxUint32, Tgid: math.MaxUint32, Token: math.MaxUint32, Phase: 2,
			Begin: math.MaxUint64, NTokens: math.MinInt32, Ret: math.MaxInt32},
		{Ts: 0, Kind: event.MarkGraph, Seq: math.MaxUint32, Nodes: math.MaxUint32, WeightNodes: 1},
		{Ts: 3, Kind: event.MarkOp, Op: math.MaxUint32, Name: "ffn_moe_up-47 (\u00e9)"},
		{Ts: 4, Kind: event.MarkSwitch, Tid: 1, Tgid: 2, PrevState: math.MinInt64, NextTid: math.MaxUint32, NextTgid: 3},
		{Ts: 4, Kind: event.MarkSwitch, PrevState: math.MaxInt64},
		{Ts: 5, Kind: event.MarkEnd},
	}
	v := appendMarkChunk(nil, ms)
	var got []event.Mark
	if err := parseMarkChunk(v, func(m *event.Mark) error { got = append(got, *m); return nil }); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ms) {
		t.Errorf("got\n%+v\nwant\n%+v", got, ms)
	}
	for cut := range len(v) {
		n := 0
		if err := parseMarkChunk(v[:cut], func(*event.Mark) error { n++; return nil }); err == nil {
			t.Errorf("timeline chunk cut to %d of %d bytes parsed (%d marks)", cut, len(v), n)
		}
	}
	if err := parseMarkChunk(append(append([]byte(nil), v...), 0), func(*event.Mark) error { return nil }); err == nil {
		t.Error("a timeline chunk with a byte too many was accepted")
	}
	if err := parseMarkChunk([]byte{9, 0}, func(*event.Mark) error { return nil }); err == nil {
		t.Error("unknown timeline encoding accepted")
	}
}

// Every key kind of ADR-001: built, it parses back to what it was built
// from, starts with its table's prefix, and a key cut short, grown by a
// byte or of another table is rejected.
func TestEveryKeyKindRoundTripsAndRejectsMalformedKeys(t *testing.T) {
	chunk := chunkKey(math.MaxUint64-1, 7)
	type idxHit struct {
		ix    chunkIndex
		v     uint32
		chunk string
	}
	parseIdx := func(k []byte) (any, error) {
		ix, v, c, err := parseChunkIndexKey(k)
		return idxHit{ix, v, string(c)}, err
	}
	agg := event.AggKey{Token: math.MaxUint32, Tensor: 3, Expert: -1, Op: 9}
	sel := event.ExpertSel{Token: 4, Layer: 47, Expert: 127}
	total := phaseAggKey{Tensor: math.MaxUint32, Phase: event.PhaseDecode, Expert: math.MaxInt16 - 1, Op: math.MaxUint32}
	pick := phasePick{Phase: event.PhasePrefill, Layer: math.MaxUint16, Expert: 127}
	tests := []struct {
		name   string
		prefix byte
		key    []byte
		parse  func([]byte) (any, error)
		want   any
	}{
		{"tensor", pTensor, tensorKey(70000), func(k []byte) (any, error) { return parseTensorKey(k) }, uint32(70000)},
		{"op", pOp, opKey(2), func(k []byte) (any, error) { return parseOpKey(k) }, uint32(2)},
		{"token row", pTokenAgg, tokenKey(math.MaxUint32), func(k []byte) (any, error) { return parseTokenKey(k) }, uint32(math.MaxUint32)},
		{"event chunk", pChunk, chunk, func(k []byte) (any, error) {
			ts, seq, err := parseChunkKey(k)
			return [2]uint64{ts, uint64(seq)}, err
		}, [2]uint64{math.MaxUint64 - 1, 7}},
		{"tensor index", pIdxTensor, ixTensor.key(nil, 5, chunk), parseIdx, idxHit{ixTensor, 5, string(chunk)}},
		{"layer index of no layer", pIdxLayer, ixLayer.key(nil, layerIndexValue(-1), chunk), parseIdx, idxHit{ixLayer, 0, string(chunk)}},
		{"layer index", pIdxLayer, ixLayer.key(nil, layerIndexValue(47), chunk), parseIdx, idxHit{ixLayer, 48, string(chunk)}},
		{"expert index of a dense tensor", pIdxExpert, ixExpert.key(nil, expertIndexValue(-1), chunk), parseIdx, idxHit{ixExpert, 0, string(chunk)}},
		{"expert index", pIdxExpert, ixExpert.key(nil, expertIndexValue(math.MaxInt16-1), chunk), parseIdx, idxHit{ixExpert, math.MaxInt16, string(chunk)}},
		{"token index", pIdxToken, ixToken.key(nil, math.MaxUint32, chunk), parseIdx, idxHit{ixToken, math.MaxUint32, string(chunk)}},
		{"op index", pIdxOp, ixOp.key(nil, 3, chunk), parseIdx, idxHit{ixOp, 3, string(chunk)}},
		{"finest aggregate", pAggTensor, aggTensorKey(agg), func(k []byte) (any, error) { return parseAggTensorKey(k) }, agg},
		{"aggregate by token", pAggToken, aggTokenKey(agg), func(k []byte) (any, error) { return parseAggTokenKey(k) },
			event.AggKey{Token: agg.Token, Tensor: agg.Tensor, Expert: agg.Expert}},
		{"aggregate by tensor and token", pAggTT, aggTTKey(3, 8), func(k []byte) (any, error) { return parseAggTTKey(k) },
			event.AggKey{Tensor: 3, Token: 8, Expert: -1}},
		{"phase total", pAggPhase, aggPhaseKey(total), func(k []byte) (any, error) { return parseAggPhaseKey(k) }, total},
		{"phase total of a dense tensor", pAggPhase, aggPhaseKey(phaseAggKey{Tensor: 2, Expert: -1}), func(k []byte) (any, error) { return parseAggPhaseKey(k) },
			phaseAggKey{Tensor: 2, Expert: -1}},
		{"tensor total", pTTPhase, ttPhaseKey(math.MaxUint32, event.PhaseDecode), func(k []byte) (any, error) { return parseTTPhaseKey(k) },
			phaseAggKey{Tensor: math.MaxUint32, Phase: event.PhaseDecode, Expert: -1}},
		{"phase pick", pSelPhase, selPhaseKey(&pick), func(k []byte) (any, error) {
			return parsePhasePick(k, appendPhasePickValue(nil, &pick))
		}, pick},
		{"timeline chunk", pMarks, markChunkKey(math.MaxUint32), func(k []byte) (any, error) { return parseMarkChunkKey(k) }, uint32(math.MaxUint32)},
		{"expert selection", pExpertSel, expertSelKey(&sel), func(k []byte) (any, error) {
			return parseExpertSel(k, appendExpertSelValue(nil, &sel))
		}, sel},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.key[0] != tc.prefix {
				t.Errorf("key %x is not in table %#x", tc.key, tc.prefix)
			}
			got, err := tc.parse(tc.key)
			if err != nil || got != tc.want {
				t.Errorf("parsed %+v (%v), want %+v", got, err, tc.want)
			}
			other := append([]byte{0x7f}, tc.key[1:]...)
			for name, bad := range map[string][]byte{"cut short": tc.key[:len(tc.key)-1], "a byte too long": append(append([]byte(nil), tc.key...), 0),
				"of another table": other, "empty": nil} {
				if _, err := tc.parse(bad); err == nil {
					t.Errorf("a key %s (%x) was accepted", name, bad)
				}
			}
		})
	}
	if !isSummaryKey(summaryKey) || isSummaryKey(tensorKey(0)) || summaryKey[0] != pSummary {
		t.Error("the summary key is not recognised as itself alone")
	}
}

// Byte order is numeric order, −1 (no layer, a dense tensor) first.
func TestKeysSortInNumericOrder(t *testing.T) {
	tests := []struct {
		name   string
		lo, hi []byte
	}{
		{"dense before expert 0", aggTensorKey(event.AggKey{Tensor: 3, Expert: -1, Token: 9}), aggTensorKey(event.AggKey{Tensor: 3, Expert: 0})},
		{"token 255 before 256", tokenKey(255), tokenKey(256)},
		{"chunks by time first", chunkKey(1<<32, 1), chunkKey(1<<32+1, 0)},
		{"layer −1 before layer 0", ixLayer.valuePrefix(layerIndexValue(-1)), ixLayer.valuePrefix(layerIndexValue(0))},
		{"tensor-major aggregates", aggTTKey(1, math.MaxUint32), aggTTKey(2, 0)},
		{"phase totals tensor-major", aggPhaseKey(phaseAggKey{Tensor: 1, Phase: event.PhaseDecode, Expert: 127, Op: 9}), aggPhasePrefix(2)},
		{"tensor totals tensor-major", ttPhaseKey(1, event.PhaseDecode), ttPhaseKey(2, event.PhaseNone)},
		{"phase totals: dense before expert 0", aggPhaseKey(phaseAggKey{Tensor: 1, Expert: -1, Op: 9}), aggPhaseKey(phaseAggKey{Tensor: 1, Expert: 0})},
	}
	for _, tc := range tests {
		if string(tc.lo) >= string(tc.hi) {
			t.Errorf("%s: %x sorts after %x", tc.name, tc.lo, tc.hi)
		}
	}
}

// Every value kind round-trips, and a value cut short or grown is an
// error, never a silent zero (a round trip that turned pages added 7 into
// 0 was the bug).
func TestEveryValueKindRoundTripsAndRejectsMalformedValues(t *testing.T) {
	var seven, most event.Counters
	for i := range event.CounterFields {
		*event.CounterFields[i].Field(&seven) = 7
		*event.CounterFields[i].Field(&most) = math.MaxUint64 - uint64(i)
	}
	tok := event.TokenInfo{Token: 12, Phase: 2, NTokens: -1, StartNS: 5, EndNS: math.MaxUint64, Counters: most,
		TensorsTouched: 3, ExpertsTouched: math.MaxUint32, Seqs: 1<<63 | 5, SeqState: event.SeqRead | event.SeqWide}
	tensor := event.Tensor{ID: 9, Name: "blk.0.ffn_up_exps.weight", Model: 0, Layer: 0, Role: "ffn_up_exps", Type: "Q4_K",
		Offset: 1 << 40, Size: 1 << 30, Experts: 128, ExpertStride: 1 << 23, Op: 4, NotFileBacked: true}
	sum := Summary{FormatVersion: FormatVersion, Records: 10, ByType: map[string]uint64{"fault": 3}, Events: 7, Incomplete: true}
	sel := event.ExpertSel{Token: 1, Layer: 2, Expert: 3, Count: math.MaxUint64}
	pick := phasePick{Phase: event.PhaseDecode, Layer: 2, Expert: 3, Count: math.MaxUint64}
	tensorValue, err := tensorValue(&tensor)
	if err != nil {
		t.Fatal(err)
	}
	sumValue, err := summaryValue(&sum)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		value []byte
		parse func([]byte) (any, error)
		want  any
		grown bool // whether a byte more must be rejected
	}{
		{"counters, every field 7", appendCounters(nil, &seven), func(v []byte) (any, error) {
			var c event.Counters
			return c, parseCounters(v, &c)
		}, seven, true},
		{"counters at their limits", appendCounters(nil, &most), func(v []byte) (any, error) {
			var c event.Counters
			err := parseCounters(v, &c)
			return c, err
		}, most, true},
		{"token row", appendTokenInfo(nil, &tok), func(v []byte) (any, error) { return parseTokenInfo(tokenKey(12), v) }, tok, true},
		{"tensor", tensorValue, func(v []byte) (any, error) { return parseTensor(tensorKey(9), v) }, tensor, false},
		{"op name", opValue("MUL_MAT_ID"), func(v []byte) (any, error) {
			_, name, err := parseOp(opKey(1), v)
			return name, err
		}, "MUL_MAT_ID", false},
		{"summary", sumValue, func(v []byte) (any, error) {
			var s Summary
			err := parseSummary(v, &s)
			return fmt.Sprintf("%+v", s), err
		}, fmt.Sprintf("%+v", sum), false},
		{"expert selection count", appendExpertSelValue(nil, &sel), func(v []byte) (any, error) {
			return parseExpertSel(expertSelKey(&sel), v)
		}, sel, true},
		{"phase pick count", appendPhasePickValue(nil, &pick), func(v []byte) (any, error) {
			return parsePhasePick(selPhaseKey(&pick), v)
		}, pick, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.parse(tc.value)
			if err != nil || !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("parsed %+v (%v), want %+v", got, err, tc.want)
			}
			if tc.name == "op name" {
				return // any bytes are a name
			}
			for cut := range len(tc.value) {
				if got, err := tc.parse(tc.value[:cut]); err == nil {
					t.Errorf("value cut to %d of %d bytes parsed as %+v", cut, len(tc.value), got)
				}
			}
			if _, err := tc.parse(append(append([]byte(nil), tc.value...), 1)); tc.grown && err == nil {
				t.Error("a value with a byte too many was accepted")
			}
		})
	}
	if _, err := parseTensor(tensorKey(8), tensorValue); err == nil {
		t.Error("a tensor row under another id was accepted")
	}
}

// The summary's unseen layers make the picks NA with the layers named,
// through the JSON the store keeps; none leave them measured.
func TestSummaryPicksNANamesTheUnseenLayers(t *testing.T) {
	for _, tc := range []struct {
		unseen []uint16
		want   string
	}{
		{nil, ""},
		{[]uint16{4, 5, 7}, "layer 4-5, 7 were not seen"},
	} {
		b, err := summaryValue(&Summary{PicksUnseen: tc.unseen})
		if err != nil {
			t.Fatal(err)
		}
		var s Summary
		if err := parseSummary(b, &s); err != nil {
			t.Fatal(err)
		}
		got := s.PicksNA()
		if (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
			t.Errorf("unseen %v: NA %q, want one saying %q", tc.unseen, got, tc.want)
		}
	}
}

// Picks unseen in some calls make NA the picks a query selects of those
// calls' tokens, phase and layers, saying which calls, layers and rows and
// why (op offload when the run had a GPU); a query of other tokens, phase
// or layers keeps them exact. The reason survives the stored JSON.
func TestSummaryPicksNAOfSaysWhichCallsLayersAndRowsWereUnseen(t *testing.T) {
	sum := &Summary{PicksUnseenCalls: []event.PicksUnseenCall{
		{Token: 1, Phase: event.PhasePrefill, Tokens: 199, Offload: true, Layers: []event.PicksUnseenLayer{{Layer: 0}, {Layer: 1}, {Layer: 2}, {Layer: 4, Rows: 7}}},
	}}
	b, err := summaryValue(sum)
	if err != nil {
		t.Fatal(err)
	}
	var s Summary
	if err := parseSummary(b, &s); err != nil {
		t.Fatal(err)
	}
	layer := func(l int) *int { return &l }
	for _, tc := range []struct {
		name string
		q    *Query
		want []string // "" for exact
	}{
		{"the whole run", nil, []string{"1 prefill llama_decode call", "token 1 (prefill, 199 tokens): layer 0-2 none of 199 rows seen, layer 4 7 of 199 rows seen", "MUL_MAT_ID on the GPU", "--no-op-offload"}},
		{"the prefill", &Query{Phase: "prefill"}, []string{"layer 0-2 none"}},
		{"the decode", &Query{Phase: "decode"}, nil},
		{"tokens after the prefill", &Query{Token: &[2]uint32{2, 9}}, nil},
		{"a layer partly seen", &Query{Layer: layer(4)}, []string{"layer 4 7 of 199 rows seen", "the probe did not read the others"}},
		{"a layer wholly seen", &Query{Layer: layer(3)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := s.PicksNAOf(tc.q)
			if (got == "") != (tc.want == nil) {
				t.Fatalf("NA %q, want NA: %v", got, tc.want != nil)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("NA %q does not say %q", got, w)
				}
			}
		})
	}
}
