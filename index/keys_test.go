package index

import (
	"math"
	"testing"

	"github.com/iocorr/iocorr/correlate"
)

func TestChunksRoundTripEveryFieldAtItsLimits(t *testing.T) {
	evs := []correlate.Event{
		{Ts: 1, Kind: correlate.KindFault, Phase: 2, Class: 2, Tensor: 3, Expert: -1, Token: 5, Tid: 9, Trigger: correlate.NoTensor, Offset: 4096, Bytes: 4096, Dur: 77},
		// a kernel address as an offset, the largest values, tokens and tids going down
		{Ts: 1, Kind: correlate.KindPageAdd, Phase: 1, Tensor: math.MaxUint32 - 1, Expert: math.MaxInt16 - 1, Token: 0, Op: math.MaxUint32,
			Tid: 0, Trigger: 0, Offset: math.MinInt64, Bytes: math.MaxUint64, Dur: math.MaxUint64},
		{Ts: math.MaxUint64, Kind: correlate.KindBlock, Class: 1, Token: math.MaxUint32, Tid: math.MaxUint32, Trigger: 7, Offset: math.MaxInt64},
	}
	v := appendChunk(nil, evs)
	r, err := newChunkReader(v)
	if err != nil {
		t.Fatal(err)
	}
	var got []correlate.Event
	var e correlate.Event
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
	v := appendChunk(nil, []correlate.Event{{Ts: 5, Tensor: 3, Bytes: 4096}, {Ts: 9, Tensor: 4, Bytes: 4096}})
	for cut := range len(v) {
		r, err := newChunkReader(v[:cut])
		if err != nil {
			continue
		}
		var e correlate.Event
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
