package extsort_test

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/iocorr/iocorr/internal/extsort"
)

type rec struct {
	key uint64
	seq uint32 // the order it was added: stability shows in it
	tag []byte
}

var codec = extsort.Codec[rec]{
	Append: func(b []byte, v *rec) []byte {
		b = binary.LittleEndian.AppendUint64(b, v.key)
		b = binary.LittleEndian.AppendUint32(b, v.seq)
		return append(b, v.tag...)
	},
	Decode: func(b []byte, v *rec) error {
		if len(b) < 12 {
			return fmt.Errorf("record of %d bytes", len(b))
		}
		v.key, v.seq, v.tag = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint32(b[8:]), append([]byte(nil), b[12:]...)
		return nil
	},
}

func byKey(a, b *rec) int { return cmp.Compare(a.key, b.key) }

func TestSorterGivesTheStableSortOfWhatWasAdded(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n, inMemory int
		keys        uint64 // distinct keys: few means many ties
	}{
		{"nothing", 0, 4, 10},
		{"fits in memory", 100, 1000, 10},
		{"exactly one full run", 64, 64, 5},
		{"many runs with ties", 10_000, 97, 50},
		{"many runs, distinct keys", 5_000, 128, 1 << 40},
		{"one record per run", 50, 1, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.n)))
			s := extsort.New(tc.inMemory, byKey, codec)
			var want []rec
			for i := range tc.n {
				r := rec{key: rng.Uint64N(tc.keys), seq: uint32(i), tag: []byte(fmt.Sprint("r", i))}
				want = append(want, r)
				if err := s.Add(r); err != nil {
					t.Fatal(err)
				}
			}
			if s.Len() != tc.n {
				t.Fatalf("Len = %d, want %d", s.Len(), tc.n)
			}
			slices.SortStableFunc(want, func(a, b rec) int { return byKey(&a, &b) })
			var got []rec
			if err := s.Each(func(v *rec) error {
				got = append(got, rec{key: v.key, seq: v.seq, tag: slices.Clone(v.tag)})
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("got %d records, want %d", len(got), len(want))
			}
			for i := range want {
				if got[i].key != want[i].key || got[i].seq != want[i].seq || string(got[i].tag) != string(want[i].tag) {
					t.Fatalf("record %d = %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

func TestSorterStopsAtTheFirstErrorOfItsCallback(t *testing.T) {
	s := extsort.New(3, byKey, codec)
	for i := range 10 {
		if err := s.Add(rec{key: uint64(10 - i)}); err != nil {
			t.Fatal(err)
		}
	}
	calls := 0
	stop := fmt.Errorf("stop")
	if err := s.Each(func(*rec) error { calls++; return stop }); err != stop {
		t.Fatalf("Each = %v, want the callback's error", err)
	}
	if calls != 1 {
		t.Fatalf("callback ran %d times after failing, want 1", calls)
	}
	if err := s.Each(func(*rec) error { return nil }); err == nil {
		t.Fatal("a second Each succeeded on a closed sorter")
	}
}

// A sorter bounded by bytes spills when the records it holds reach the
// bound, however few they are: one large record spills alone, many
// small ones share a run.
func TestSizedSorterSpillsByTheBytesItHolds(t *testing.T) {
	size := func(v *rec) int { return len(v.tag) }
	for _, tc := range []struct {
		name     string
		tags     []int // each record's size, in order
		maxBytes int
		runs     int
	}{
		{"small records share a run", []int{10, 10, 10, 10, 10}, 100, 0},
		{"the bound reached spills", []int{40, 40, 40, 40, 40}, 80, 2},
		{"one large record spills alone", []int{1000, 1, 1000, 1}, 500, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := extsort.NewSized(tc.maxBytes, size, byKey, codec)
			want := make([]uint64, 0, len(tc.tags))
			for i, n := range tc.tags {
				k := uint64(len(tc.tags) - i)
				want = append(want, k)
				if err := s.Add(rec{key: k, seq: uint32(i), tag: make([]byte, n)}); err != nil {
					t.Fatal(err)
				}
			}
			if s.Runs() != tc.runs {
				t.Errorf("%d runs spilled, want %d", s.Runs(), tc.runs)
			}
			slices.Sort(want)
			var got []uint64
			if err := s.Each(func(v *rec) error { got = append(got, v.key); return nil }); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("keys %v, want %v", got, want)
			}
		})
	}
}
