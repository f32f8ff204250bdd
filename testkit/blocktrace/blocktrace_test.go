//go:build linux

package blocktrace

import (
	"slices"
	"strconv"
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

func TestATimedTraceReadsIssuesAndTheirTimes(t *testing.T) {
	for _, tc := range []struct {
		line          string
		re            string
		sector, n, ts uint64
	}{
		{"              dd-18752   [001] .....  1844.791310: block_rq_issue: 254,0 RS 1044480 () 34619392 + 2040 be,0,4 [dd]", "issue", 34619392, 2040, 1844_791310_000},
		{"         compile-18660   [001] ..s..  1844.790658: block_rq_complete: 254,0 RA () 12580640 + 8 be,0,4 [0]", "complete", 12580640, 8, 1844_790658_000},
	} {
		re := completionLine
		if tc.re == "issue" {
			re = issueLine
		}
		m := re.FindStringSubmatch(tc.line)
		if m == nil || m[2] != strconv.FormatUint(tc.sector, 10) || m[3] != strconv.FormatUint(tc.n, 10) {
			t.Errorf("%s: read %q", tc.line, m)
		}
		if ts, err := stamp(tc.line); err != nil || ts != tc.ts {
			t.Errorf("%s: time %d (%v), want %d", tc.line, ts, err, tc.ts)
		}
	}
}
