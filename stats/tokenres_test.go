package stats

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// What a token's snapshot was is what is read back, whatever was kept
// and read between (the buffered writes reach the file first), and a
// token never kept has none.
func TestTokenSnapshotsReadBackAsKept(t *testing.T) {
	const tokens, tensors = 3000, 300
	rng := rand.New(rand.NewPCG(1, 2))
	s := newTokenSnaps(tokens)
	defer s.Close()
	want := make([][]int64, tokens)
	got := make([]int64, tensors)
	for ti := range tokens {
		if ti%7 == 3 {
			continue // no snapshot of this token
		}
		want[ti] = make([]int64, tensors)
		for i := range want[ti] {
			want[ti][i] = rng.Int64N(1 << uint(rng.IntN(40)+1))
		}
		if err := s.put(ti, want[ti]); err != nil {
			t.Fatal(err)
		}
		// Reads between puts, of any token kept so far.
		if back := rng.IntN(ti + 1); want[back] != nil {
			if ok, err := s.get(back, got); err != nil || !ok || !slices.Equal(got, want[back]) {
				t.Fatalf("token %d read back after %d puts: %v, %v", back, ti, ok, err)
			}
		}
	}
	for ti := range tokens {
		ok, err := s.get(ti, got)
		if err != nil {
			t.Fatal(err)
		}
		if ok != (want[ti] != nil) || (ok && !slices.Equal(got, want[ti])) {
			t.Fatalf("token %d: read back %v (kept: %v)", ti, ok, want[ti] != nil)
		}
	}
}
