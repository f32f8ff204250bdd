package extsort

import (
	"cmp"
	"encoding/binary"
	"errors"
	"testing"
)

type pair struct{ key, seq uint64 }

var pairCodec = Codec[pair]{
	Append: func(b []byte, v *pair) []byte {
		return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(b, v.key), v.seq)
	},
	Decode: func(b []byte, v *pair) error {
		if len(b) != 16 {
			return errors.New("short pair")
		}
		v.key, v.seq = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
		return nil
	},
}

// However many runs a sort spills, the runs held at once stay under
// (fanIn-1) per level plus one, and the merged levels still give the
// stable sort: with fanIn 3 and a run per two records, 3,000 records make
// 1,500 runs, of which at most 2 per level (7 levels) are ever open.
func TestSpilledRunsAreMergedLevelByLevelAndStayStable(t *testing.T) {
	const n, fanIn = 3000, 3
	s := New(2, func(a, b *pair) int { return cmp.Compare(a.key, b.key) }, pairCodec)
	s.fanIn = fanIn
	most := 0
	for i := range n {
		if err := s.Add(pair{key: uint64(i*7919) % 13, seq: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		most = max(most, s.Runs())
	}
	if bound := (fanIn-1)*7 + 1; most > bound {
		t.Errorf("%d runs held at once, want at most %d", most, bound)
	}
	var last pair
	got := 0
	if err := s.Each(func(v *pair) error {
		if got > 0 && (v.key < last.key || v.key == last.key && v.seq < last.seq) {
			t.Fatalf("record %d %+v after %+v: not the stable order", got, *v, last)
		}
		last = *v
		got++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("%d records out, %d in", got, n)
	}
}
