package recorder

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rusages hands out the figures of its samples in turn, as getrusage
// would at the release, the exit and the end; a nil sample fails.
type rusages []*unix.Rusage

func (s *rusages) next(ru *unix.Rusage) error {
	cur := (*s)[0]
	*s = (*s)[1:]
	if cur == nil {
		return errors.New("getrusage failed")
	}
	*ru = *cur
	return nil
}

// ru is a rusage of user and system CPU in milliseconds, voluntary
// context switches and peak RSS.
func ru(userMS, sysMS, wakes, rssKiB int64) *unix.Rusage {
	return &unix.Rusage{Utime: unix.NsecToTimeval(userMS * 1e6), Stime: unix.NsecToTimeval(sysMS * 1e6), Nvcsw: wakes, Maxrss: rssKiB}
}

func TestSelfCostSplitsTheRecordersCPUAtTheCommandsReleaseAndExit(t *testing.T) {
	type want struct {
		user, sys, before, while int64 // ms
		wakes                    *int64
		none                     bool // no recorder figures at all
	}
	seven := int64(7)
	tests := []struct {
		name    string
		samples rusages // release, exit, end; fewer when not taken
		phases  bool    // released and exited are called
		want    want
	}{
		{"a launched command", rusages{ru(30, 10, 3, 0), ru(50, 15, 10, 0), ru(60, 20, 12, 9000)}, true,
			want{user: 60, sys: 20, before: 40, while: 25, wakes: &seven}},
		{"an attached command: the end only", rusages{ru(60, 20, 12, 9000)}, false,
			want{user: 60, sys: 20}},
		{"the release unknown", rusages{nil, ru(50, 15, 10, 0), ru(60, 20, 12, 9000)}, true,
			want{user: 60, sys: 20}},
		{"the exit unknown", rusages{ru(30, 10, 3, 0), nil, ru(60, 20, 12, 9000)}, true,
			want{user: 60, sys: 20}},
		{"the end unknown", rusages{ru(30, 10, 3, 0), ru(50, 15, 10, 0), nil}, true,
			want{none: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.samples
			c := selfCost{rusage: s.next}
			if tc.phases {
				c.released()
				c.exited()
			}
			got := c.summary()
			if tc.want.none {
				if got != nil {
					t.Fatalf("figures %+v from an unreadable rusage", got)
				}
				return
			}
			if got == nil {
				t.Fatal("no figures")
			}
			ms := func(ns int64) int64 { return ns / 1e6 }
			if ms(got.UserNS) != tc.want.user || ms(got.SystemNS) != tc.want.sys || got.MaxRSSKiB != 9000 {
				t.Errorf("user %d ms, sys %d ms, rss %d KiB; want %d, %d, 9000", ms(got.UserNS), ms(got.SystemNS), got.MaxRSSKiB, tc.want.user, tc.want.sys)
			}
			if ms(got.BeforeNS) != tc.want.before || ms(got.WhileNS) != tc.want.while {
				t.Errorf("before %d ms, while %d ms; want %d, %d", ms(got.BeforeNS), ms(got.WhileNS), tc.want.before, tc.want.while)
			}
			if (got.WakesWhile == nil) != (tc.want.wakes == nil) || (got.WakesWhile != nil && *got.WakesWhile != *tc.want.wakes) {
				t.Errorf("wakes while %v, want %v", got.WakesWhile, tc.want.wakes)
			}
		})
	}
}

// The real figures: what the process spends between the samples is at
// least what one of its threads spent there by its own clock, and its
// sleeps there are voluntary context switches; the phases fit in the
// end's total.
func TestSelfCostOfThisProcessCountsItsCPUAndSleepsWhileTheCommandRuns(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	threadCPU := func() int64 {
		var ts unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
			t.Fatal(err)
		}
		return ts.Nano()
	}
	var c selfCost
	c.released()
	start := threadCPU()
	for threadCPU()-start < int64(30*time.Millisecond) {
	}
	burned := threadCPU() - start
	const sleeps = 5
	for range sleeps {
		time.Sleep(time.Millisecond)
	}
	c.exited()
	got := c.summary()
	if got == nil || got.WakesWhile == nil {
		t.Fatalf("figures %+v", got)
	}
	if got.WhileNS < burned*9/10 {
		t.Errorf("CPU while %d ns, below the %d ns one thread burned then", got.WhileNS, burned)
	}
	if total := got.UserNS + got.SystemNS; got.BeforeNS <= 0 || got.BeforeNS+got.WhileNS > total {
		t.Errorf("before %d + while %d ns, want both within the total %d", got.BeforeNS, got.WhileNS, total)
	}
	if *got.WakesWhile < sleeps {
		t.Errorf("%d wakes while, want at least the %d sleeps", *got.WakesWhile, sleeps)
	}
}
