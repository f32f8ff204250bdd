package event

import (
	"math/big"
	"math/rand/v2"
	"reflect"
	"testing"
)

func TestSharesWeighEachSequenceByItsTokensInTheBatch(t *testing.T) {
	counted := func(ns ...uint16) (a [SeqCounted]uint16) {
		copy(a[:], ns)
		return a
	}
	tests := []struct {
		name string
		tok  TokenInfo
		want []Share
	}{
		{"a prompt of 9 beside one decode step", TokenInfo{Token: 4, Seqs: 0b11, SeqState: SeqRead, SeqTokens: counted(9, 1)},
			[]Share{{0, 9}, {1, 1}}},
		{"three sequences, gaps in the ids", TokenInfo{Token: 4, Seqs: 0b1010_0001, SeqState: SeqRead, SeqTokens: counted(1, 0, 0, 0, 0, 2, 0, 3)},
			[]Share{{0, 1}, {5, 2}, {7, 3}}},
		{"a sequence past the counted ones: equal weights", TokenInfo{Token: 4, Seqs: 1 | 1<<20, SeqState: SeqRead | SeqUncounted, SeqTokens: counted(5)},
			[]Share{{0, 1}, {20, 1}}},
		{"counts of 0 (a kernel that did not count): equal weights", TokenInfo{Token: 4, Seqs: 0b11, SeqState: SeqRead},
			[]Share{{0, 1}, {1, 1}}},
		{"one sequence: not shared", TokenInfo{Token: 4, Seqs: 0b10, SeqState: SeqRead, SeqTokens: counted(0, 3)}, nil},
		{"ids past the read bound: the set is not whole", TokenInfo{Token: 4, Seqs: 0b11, SeqState: SeqRead | SeqPartial, SeqTokens: counted(1, 1)}, nil},
		{"an id out of range: the set is not whole", TokenInfo{Token: 4, Seqs: 0b11, SeqState: SeqRead | SeqWide, SeqTokens: counted(1, 1)}, nil},
		{"not read", TokenInfo{Token: 4, Seqs: 0b11, SeqTokens: counted(1, 1)}, nil},
		{"token 0, before any llama_decode", TokenInfo{Seqs: 0b11, SeqState: SeqRead, SeqTokens: counted(1, 1)}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tok.Shares(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("shares %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSplitGivesEachShareItsPartAndTheRemainderToTheLargestFractions(t *testing.T) {
	tests := []struct {
		name   string
		major  uint64
		shares []Share
		want   []uint64
	}{
		{"exact", 10, []Share{{0, 9}, {1, 1}}, []uint64{9, 1}},
		{"7 by 1:1: the tie goes to the lower sequence", 7, []Share{{0, 1}, {3, 1}}, []uint64{4, 3}},
		{"10 by 1:1:1", 10, []Share{{0, 1}, {1, 1}, {2, 1}}, []uint64{4, 3, 3}},
		{"5 by 1:2: 5/3 and 10/3, the larger fraction gets the unit", 5, []Share{{0, 1}, {1, 2}}, []uint64{2, 3}},
		{"1 by 1:9", 1, []Share{{0, 1}, {1, 9}}, []uint64{0, 1}},
		{"0", 0, []Share{{0, 4}, {1, 5}}, []uint64{0, 0}},
		{"no overflow near 2^64", 1<<64 - 1, []Share{{0, 1 << 15}, {1, 1<<15 + 1}}, []uint64{9223231301513871360, 9223512772195680255}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Split(&Counters{Major: tc.major}, tc.shares)
			for i, w := range tc.want {
				if got[i].Major != w {
					t.Errorf("share %d (sequence %d): %d, want %d", i, tc.shares[i].Seq, got[i].Major, w)
				}
			}
		})
	}
}

// TestSplitSumsToTheWholeAndStaysWithinAUnitOfTheExactPart checks every
// counter of random counters and weights against big-number arithmetic:
// the parts sum to the whole, and each is its exact share rounded down or
// up.
func TestSplitSumsToTheWholeAndStaysWithinAUnitOfTheExactPart(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		var c Counters
		for _, d := range CounterFields {
			*d.Field(&c) = rng.Uint64N(1 << uint(rng.IntN(63)+1))
		}
		shares := make([]Share, rng.IntN(7)+2)
		for i := range shares {
			shares[i] = Share{Seq: i, Weight: rng.Uint64N(8192) + 1}
		}
		parts := Split(&c, shares)
		var total uint64
		for _, s := range shares {
			total += s.Weight
		}
		for _, d := range CounterFields {
			v := *d.Field(&c)
			var sum uint64
			for i, s := range shares {
				got := *d.Field(&parts[i])
				sum += got
				exact := new(big.Rat).SetFrac(new(big.Int).Mul(new(big.Int).SetUint64(v), new(big.Int).SetUint64(s.Weight)), new(big.Int).SetUint64(total))
				lo := new(big.Int).Quo(exact.Num(), exact.Denom())
				if g := new(big.Int).SetUint64(got); g.Cmp(lo) < 0 || g.Cmp(new(big.Int).Add(lo, big.NewInt(1))) > 0 {
					t.Fatalf("%s %d by %v: share %d got %d, exact %s", d.Name, v, shares, i, got, exact.FloatString(3))
				}
			}
			if sum != v {
				t.Fatalf("%s %d by %v: the parts sum to %d", d.Name, v, shares, sum)
			}
		}
	}
}
