package event

import "testing"

func TestRequestNamesTheSequenceOrThePseudoRequestOfAToken(t *testing.T) {
	tests := []struct {
		name string
		tok  TokenInfo
		want string
	}{
		{"one sequence", TokenInfo{Token: 3, Seqs: 1 << 5, SeqState: SeqRead}, "5"},
		{"sequence 63", TokenInfo{Token: 3, Seqs: 1 << 63, SeqState: SeqRead}, "63"},
		{"no seq_id array is sequence 0", TokenInfo{Token: 1, Seqs: 1, SeqState: SeqRead | SeqDefault}, "0"},
		{"two sequences share the batch", TokenInfo{Token: 3, Seqs: 1<<0 | 1<<1, SeqState: SeqRead}, RequestShared},
		{"two read, more past the bound", TokenInfo{Token: 3, Seqs: 3, SeqState: SeqRead | SeqPartial}, RequestShared},
		{"one read, more past the bound", TokenInfo{Token: 3, Seqs: 2, SeqState: SeqRead | SeqPartial}, RequestIncomplete},
		{"one read, one id over 63", TokenInfo{Token: 3, Seqs: 2, SeqState: SeqRead | SeqWide}, RequestIncomplete},
		{"only ids over 63", TokenInfo{Token: 3, SeqState: SeqRead | SeqWide}, RequestIncomplete},
		{"batch not read", TokenInfo{Token: 3, Seqs: 0}, RequestUnknown},
		{"read, empty", TokenInfo{Token: 3, SeqState: SeqRead}, RequestUnknown},
		{"before the first decode", TokenInfo{Token: 0, Seqs: 1, SeqState: SeqRead}, RequestNone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.tok.Request(); got != tc.want {
				t.Errorf("Request() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRequestOrderPutsSequencesByIDThenSharedThenPseudoRequests(t *testing.T) {
	keys := []string{"0", "1", "63", RequestShared, RequestIncomplete, RequestUnknown, RequestNone}
	for i := 1; i < len(keys); i++ {
		if RequestOrder(keys[i-1]) >= RequestOrder(keys[i]) {
			t.Errorf("%q is ordered at or after %q", keys[i-1], keys[i])
		}
	}
}
