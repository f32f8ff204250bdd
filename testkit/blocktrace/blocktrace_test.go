//go:build linux

package blocktrace

import (
	"slices"
	"testing"
)

func TestTheKernelFilterLetsInEveryRequestThatTouchesTheRanges(t *testing.T) {
	many := make([]Range, 100)
	for i := range many {
		many[i] = Range{uint64(i) * 1000, uint64(i)*1000 + 10}
	}
	for _, tc := range []struct {
		name   string
		ranges []Range
		slack  uint64
		want   []Range
	}{
		{"one range starts back by the largest request", []Range{{100, 200}}, 8, []Range{{92, 200}}},
		{"the slack stops at sector 0", []Range{{5, 10}}, 8, []Range{{0, 10}}},
		{"unsorted ranges are sorted", []Range{{500, 600}, {100, 200}}, 0, []Range{{100, 200}, {500, 600}}},
		{"ranges that meet once widened merge", []Range{{100, 200}, {205, 300}}, 8, []Range{{92, 300}}},
		{"too many ranges merge the closest first", many, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := filterRanges(tc.ranges, tc.slack)
			if tc.want != nil && !slices.Equal(got, tc.want) {
				t.Fatalf("filterRanges(%v, %d) = %v, want %v", tc.ranges, tc.slack, got, tc.want)
			}
			if len(got) > maxFilterRanges {
				t.Fatalf("%d ranges in the filter, more than %d", len(got), maxFilterRanges)
			}
			// Whatever was merged, every sector asked for is let in.
			for _, r := range tc.ranges {
				in := false
				for _, g := range got {
					in = in || (g.Start <= r.Start-min(r.Start, tc.slack) && r.End <= g.End)
				}
				if !in {
					t.Errorf("range %v (slack %d) is not inside the filter's %v", r, tc.slack, got)
				}
			}
		})
	}
}
