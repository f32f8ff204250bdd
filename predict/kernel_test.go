package predict

import (
	"testing"

	"github.com/iocorr/iocorr/event"
)

// cyclicRun is a run of one file of pages pages whose every call reads
// the file front to back: the stream where an LRU-like cache smaller than
// the file misses every page (each is evicted before its next use).
func cyclicRun(pages int32, calls int) *Run {
	r := &Run{pages: pages, loaded: true, byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {calls: calls, tokens: int64(calls)}}}
	r.Model.Size = int64(pages) * pageSize
	for range calls {
		r.calls = append(r.calls, call{phase: event.PhaseDecode, reads: []pageRange{{0, pages}}})
	}
	return r
}

func TestTheKernelModelsBytesOnStreamsWhoseAnswerIsKnown(t *testing.T) {
	const pages, calls = 1000, 5
	for _, tc := range []struct {
		name     string
		capacity int64
		ra       int32
		pinned   []pageRange
		// want is the pages read per call.
		want uint64
	}{
		// The whole file fits: the load reads it, no call reads again.
		{"the file fits", pages, 64, nil, 0},
		// Without readahead, a cache under half the file evicts each
		// page (young once, rotated once, then old) before its next use.
		{"a cyclic stream larger than the cache", 300, 1, nil, pages},
		// Pinned pages are never read again; the rest still cycle.
		{"pinned pages stay", 300, 1, []pageRange{{0, 200}}, pages - 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := cyclicRun(pages, calls).simulate(tc.capacity, tc.ra, tc.pinned, false)
			if b := got[event.PhaseDecode][0] / calls / pageSize; b != tc.want {
				t.Errorf("read %d pages per call, want %d", b, tc.want)
			}
		})
	}
}

func TestBeladyNeverReadsMoreThanTheKernelModel(t *testing.T) {
	r := cyclicRun(1000, 4)
	// A stream with reuse at several distances: the cyclic scan, then a
	// hot prefix read again within each call.
	for i := range r.calls {
		r.calls[i].reads = append(r.calls[i].reads, pageRange{0, 100}, pageRange{500, 550}, pageRange{0, 100})
	}
	for _, capacity := range []int64{50, 150, 400, 900, 2000} {
		k, _ := r.simulate(capacity, 16, nil, false)
		b := r.belady(capacity)
		if b[event.PhaseDecode][0] > k[event.PhaseDecode][0] {
			t.Errorf("capacity %d: Belady read %d bytes, the kernel model %d", capacity, b[event.PhaseDecode][0], k[event.PhaseDecode][0])
		}
		// Belady's demand misses: at least the pages a call reads that
		// cannot all be resident.
		if capacity < 1000 && b[event.PhaseDecode][0] == 0 {
			t.Errorf("capacity %d: Belady read nothing of a 1000-page stream", capacity)
		}
	}
}

// The mmap_miss back-off, by the kernel's rule: a major fault adds one,
// fault-around takes one per page it maps that is not workingset. Faults
// far apart in a cold file read a window each and their retries map the
// window's fresh pages, so read-around never stops; the same faults on
// pages that come back workingset (evicted from the active list, refaulted
// within the distance) are never paid back, and past MMAP_LOTSAMISS each
// reads its page alone.
func TestTheBackOffStopsReadAroundOnlyWhereFaultsAreNotPaidBack(t *testing.T) {
	const ra, faults = 64, 150
	for _, tc := range []struct {
		name       string
		workingset bool
		backedOff  uint64
	}{
		{"fresh pages pay each miss back", false, 0},
		{"workingset refaults do not", true, faults - mmapLotsaMiss},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pages := int32(faults * ra * 2)
			c := newPageCache(pages, int64(pages), ra, nil)
			if tc.workingset {
				// Every page evicted once from the active list, so
				// recently that its refault passes the distance test.
				c.age = 1
				for p := range pages {
					c.flags[p], c.shadow[p] = flagShadowWS, 1
				}
			}
			for i := range int32(faults) {
				c.access(pageRange{i * 2 * ra, i*2*ra + 1})
			}
			if c.majors != faults || c.backedOff != tc.backedOff {
				t.Errorf("%d major faults, %d read their page alone; want %d and %d", c.majors, c.backedOff, faults, tc.backedOff)
			}
			if want := uint64(faults-tc.backedOff)*ra + tc.backedOff; c.readPages != want {
				t.Errorf("read %d pages, want %d", c.readPages, want)
			}
		})
	}
}

// Reclaim scans the two lists in proportion to their sizes, as the
// kernel's get_scan_count does while refaults are seen: each page the
// inactive tail gives up moves active ÷ inactive pages of the active tail
// to the inactive list, whichever list is longer. Holding the inactive
// list at half the cache instead (the earlier model) deactivated nothing
// from a short active list and all of a long one's excess at once, and
// evicted read-ahead pages after half the cache's worth of reads where
// the kernel's lasted most of it (docs/overhead.md, session 14).
func TestReclaimScansBothListsInProportionToTheirSizes(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		inactive, active, excess int64
	}{
		{"a short active list", 300, 100, 30},
		{"a long active list", 100, 300, 30},
		{"lists of one size", 200, 200, 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := int32(tc.inactive + tc.active)
			c := newPageCache(n, int64(n), 1, nil)
			for p := range n {
				c.pushHead(map[bool]uint8{true: listInactive, false: listActive}[int64(p) < tc.inactive], p)
			}
			c.capacity = int64(n) - tc.excess
			c.reclaim()
			var evicted, deactivated int64
			for p := range n {
				switch {
				case c.where[p] == listNone:
					evicted++
				case int64(p) >= tc.inactive && c.where[p] == listInactive:
					deactivated++
				}
			}
			if evicted != tc.excess {
				t.Errorf("evicted %d pages, want the %d over the limit", evicted, tc.excess)
			}
			// The ratio falls as the active list gives pages up, so the
			// pages moved lie between the excess at the last ratio and at
			// the first.
			lo := tc.excess*c.count[listActive]/c.count[listInactive] - 1
			hi := (tc.excess*tc.active + tc.inactive - 1) / tc.inactive
			if deactivated < lo || deactivated > hi {
				t.Errorf("moved %d active pages to the inactive list, want %d to %d (active ÷ inactive %d/%d before, %d/%d after)",
					deactivated, lo, hi, tc.active, tc.inactive, c.count[listActive], c.count[listInactive])
			}
		})
	}
}

// A read-around window larger than the cache ends where the cache has no
// room left but the window's own pages (readahead's charge fails: its
// folios, locked under their read, cannot be reclaimed for the next), and
// a fault whose page the window did not reach reads that page alone.
func TestAWindowLargerThanTheCacheEndsWhereTheCacheIsFull(t *testing.T) {
	const pages = 4096
	for _, tc := range []struct {
		name     string
		capacity int64
		ra       int32
		fault    int32
		// wantRead is the pages the fault reads.
		wantRead int64
	}{
		{"a window the cache holds", 1000, 256, 2000, 256},
		{"a window twice the cache", 100, 256, 2000, 100 + 1},
		{"a window that reaches the page within the cache", 200, 256, 2000, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPageCache(pages, tc.capacity, tc.ra, nil)
			c.touch(tc.fault)
			if int64(c.readPages) != tc.wantRead {
				t.Errorf("the fault read %d pages, want %d", c.readPages, tc.wantRead)
			}
			if !c.resident(tc.fault) {
				t.Errorf("page %d is not resident after its fault", tc.fault)
			}
			if n := c.count[listInactive] + c.count[listActive]; n > tc.capacity {
				t.Errorf("%d pages cached, over the capacity %d", n, tc.capacity)
			}
		})
	}
}

// Released pages are the ones reclaim takes first: a page the graph used
// (mapped, young) gets a second pass on the inactive tail and a page a
// prefetcher brought in and nobody used yet does not, so without release
// the unused one goes; released (MADV_COLD), the used one goes. A
// released active page moves to the inactive head, behind the unused
// page, which still goes first; an unmapped page is out of the advice's
// reach.
func TestReleasedPagesAreReclaimedBeforeUnusedPrefetchedOnes(t *testing.T) {
	tests := []struct {
		name    string
		release []int32
		activ   bool // the used page was activated first
		evicted int32
	}{
		{"without release the unused prefetched page goes", nil, false, 1},
		{"a released used page goes first", []int32{0}, false, 0},
		{"a released active page goes to the inactive head, behind the unused one", []int32{0}, true, 1},
		{"releasing an unmapped page changes nothing", []int32{1}, false, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newPageCache(16, 2, 1, nil)
			c.prefetch(pageRange{0, 1})
			c.access(pageRange{0, 1}) // used: mapped and young
			if tc.activ {
				c.unlink(0)
				c.pushHead(listActive, 0)
			}
			c.prefetch(pageRange{1, 2}) // brought in, not used yet
			c.release(tc.release)
			c.prefetch(pageRange{2, 3}) // over the capacity: one goes
			if c.resident(tc.evicted) || !c.resident(1-tc.evicted) {
				t.Errorf("resident: page 0 %v, page 1 %v; want page %d evicted", c.resident(0), c.resident(1), tc.evicted)
			}
			if tc.release != nil && tc.release[0] == 0 && c.resident(0) && (c.where[0] != listInactive || c.flags[0]&(flagYoung|flagRef) != 0) {
				t.Errorf("the released page is on list %d with flags %b, want the inactive list, neither young nor referenced", c.where[0], c.flags[0])
			}
		})
	}
}
