package wire

import (
	"slices"
	"testing"
)

func TestPageRunRangesAreItsStretchesOfPages(t *testing.T) {
	holey := func(index uint64, n, span uint32, bits ...uint32) PageRunEvent {
		e := PageRunEvent{Index: index, NrPages: n, Span: span}
		for _, b := range bits {
			e.Pages[b/64] |= 1 << (b % 64)
		}
		return e
	}
	for _, tc := range []struct {
		name string
		run  PageRunEvent
		want [][2]uint64
		ok   bool
	}{
		{"contiguous, longer than the window", PageRunEvent{Index: 7, NrPages: 2048, Span: 2048}, [][2]uint64{{7, 2048}}, true},
		{"holes", holey(100, 4, 70, 0, 1, 63, 69), [][2]uint64{{100, 2}, {163, 1}, {169, 1}}, true},
		{"a stretch across a word", holey(0, 4, 66, 0, 63, 64, 65), [][2]uint64{{0, 1}, {63, 3}}, true},
		{"empty", PageRunEvent{Index: 1}, nil, false},
		{"more pages than bits", holey(0, 5, 8, 0, 7), nil, false},
		{"span wider than the window", holey(0, 2, uint32(RunPages)+1, 0), nil, false},
		{"span not ending on a page of the run", holey(0, 2, 10, 0, 5), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]uint64
			ok := tc.run.Ranges(func(first, n uint64) { got = append(got, [2]uint64{first, n}) })
			if ok != tc.ok || !slices.Equal(got, tc.want) {
				t.Errorf("Ranges = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
