package predict

// pageCache is the kernel policy's model of one model file's pages in a
// memory cgroup: Linux's two LRU lists of file pages (without MGLRU, as
// on this project's kernels), page by page.
//
//   - A page read in goes to the head of the inactive list, or straight to
//     the active list when it is a refault whose distance (pages evicted or
//     activated since it was evicted, the kernel's nonresident age) is at
//     most the active list's size: mm/workingset.c's test.
//   - A mapped file page is referenced through its page table (young) and
//     the kernel looks only at reclaim time: on the inactive tail a young
//     page is kept once (PG_referenced set, rotated to the head) and
//     activated when it is young again at its next scan; an old one is
//     evicted (mm/vmscan.c folio_check_references).
//   - The inactive list is kept at least as long as the active one (the
//     ratio of a cgroup under 1 GiB): the active tail is moved to the
//     inactive head, its young bit cleared (shrink_active_list).
//   - A fault on a missing page reads around it: a window of ra pages
//     centred on it (moved inside the file at its start), with the async
//     marker a quarter from its end; a hit on
//     a marked page reads the next window from the first missing page after
//     it, marked at its start, so a sequential scan streams ahead of its
//     faults (mm/filemap.c do_sync/async_mmap_readahead, mm/readahead.c).
//     Pages already resident in a window are skipped, as the kernel does.
//
// This is an approximation, said where it departs: reclaim runs page by
// page to the limit (the kernel reclaims in batches of 32), every page of
// a file shares one readahead state, the mmap_miss back-off is left out,
// and the cgroup's other memory is a constant (the run's non-file memory).
// Pinned pages (a plan's) are resident, on no list and never evicted; the
// lists' capacity is what is left of the budget besides them.
type pageCache struct {
	n          int32
	capacity   int64
	ra         int32
	prev, next []int32
	where      []uint8 // listNone, listInactive, listActive, listPinned
	flags      []uint8 // flagYoung, flagRef, flagMarker
	shadow     []uint32
	head, tail [3]int32
	count      [3]int64
	age        uint32

	readPages, majors uint64
	// readBy counts the pages read in while counting is on, by page: what
	// a plan ranks by.
	readBy   []uint32
	counting bool
}

const (
	listNone uint8 = iota
	listInactive
	listActive
	listPinned
)

const (
	flagYoung uint8 = 1 << iota
	flagRef
	flagMarker
)

func newPageCache(pages int32, capacity int64, ra int32, pinned []pageRange) *pageCache {
	c := &pageCache{n: pages, capacity: capacity, ra: max(ra, 1),
		prev: make([]int32, pages), next: make([]int32, pages),
		where: make([]uint8, pages), flags: make([]uint8, pages), shadow: make([]uint32, pages)}
	for l := range c.head {
		c.head[l], c.tail[l] = -1, -1
	}
	for _, r := range pinned {
		for p := max(r.first, 0); p < r.end && p < pages; p++ {
			c.where[p] = listPinned
		}
	}
	return c
}

func (c *pageCache) resident(p int32) bool { return c.where[p] != listNone }

func (c *pageCache) unlink(p int32) {
	l := c.where[p]
	if c.prev[p] >= 0 {
		c.next[c.prev[p]] = c.next[p]
	} else {
		c.head[l] = c.next[p]
	}
	if c.next[p] >= 0 {
		c.prev[c.next[p]] = c.prev[p]
	} else {
		c.tail[l] = c.prev[p]
	}
	c.count[l]--
	c.where[p] = listNone
}

func (c *pageCache) pushHead(l uint8, p int32) {
	c.where[p] = l
	c.prev[p], c.next[p] = -1, c.head[l]
	if c.head[l] >= 0 {
		c.prev[c.head[l]] = p
	} else {
		c.tail[l] = p
	}
	c.head[l] = p
	c.count[l]++
}

// add reads page p in (it is not resident).
func (c *pageCache) add(p int32) {
	c.readPages++
	if c.counting {
		c.readBy[p]++
	}
	if s := c.shadow[p]; s != 0 && int64(c.age-s) <= c.count[listActive] {
		c.age++
		c.pushHead(listActive, p)
		return
	}
	c.pushHead(listInactive, p)
}

// reclaim evicts to the capacity.
func (c *pageCache) reclaim() {
	for c.count[listInactive]+c.count[listActive] > c.capacity {
		if c.count[listInactive] < c.count[listActive] || c.count[listInactive] == 0 {
			p := c.tail[listActive]
			c.unlink(p)
			c.flags[p] &^= flagYoung
			c.pushHead(listInactive, p)
			continue
		}
		p := c.tail[listInactive]
		f := c.flags[p]
		switch {
		case f&flagYoung != 0 && f&flagRef != 0:
			c.unlink(p)
			c.flags[p] &^= flagYoung | flagRef
			c.age++
			c.pushHead(listActive, p)
		case f&flagYoung != 0:
			c.unlink(p)
			c.flags[p] = f&^flagYoung | flagRef
			c.pushHead(listInactive, p)
		default:
			c.unlink(p)
			c.flags[p] = 0
			c.age++
			c.shadow[p] = c.age
		}
	}
}

// readWindow reads the missing pages of [first, end) and marks page mark.
func (c *pageCache) readWindow(first, end, mark int32) {
	first, end = max(first, 0), min(end, c.n)
	for p := first; p < end; p++ {
		if !c.resident(p) {
			c.add(p)
		}
	}
	if mark >= first && mark < end && c.where[mark] != listPinned {
		c.flags[mark] |= flagMarker
	}
}

// touch is one access of page p.
func (c *pageCache) touch(p int32) {
	switch c.where[p] {
	case listPinned:
		return
	case listNone:
		c.majors++
		// Near the file's start the window moves, not shrinks: the kernel
		// reads [0, ra) for page 0 (ra->start = max(0, pgoff - ra/2)).
		start := max(p-c.ra/2, 0)
		c.readWindow(start, start+c.ra, start+c.ra-c.ra/4)
		if !c.resident(p) { // a window clipped away from it cannot happen, but a page is always read
			c.add(p)
		}
		c.flags[p] |= flagYoung
		c.reclaim()
		return
	}
	c.flags[p] |= flagYoung
	if c.flags[p]&flagMarker != 0 {
		c.flags[p] &^= flagMarker
		q := p + 1
		for q < c.n && q < p+c.ra && c.resident(q) {
			q++
		}
		if q < c.n && !c.resident(q) {
			c.readWindow(q, q+c.ra, q)
			c.reclaim()
		}
	}
}

// access reads pages [first, end) in order.
func (c *pageCache) access(r pageRange) {
	for p := max(r.first, 0); p < r.end && p < c.n; p++ {
		c.touch(p)
	}
}
