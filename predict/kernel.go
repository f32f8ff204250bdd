package predict

// pageCache is the kernel policy's model of one model file's pages in a
// memory cgroup: Linux's two LRU lists of file pages (without MGLRU, as
// on this project's kernels), page by page.
//
//   - A page read in goes to the head of the inactive list, or straight to
//     the active list when it is a refault whose distance (pages evicted or
//     activated since it was evicted, the kernel's nonresident age) is at
//     most the active list's size: mm/workingset.c's test.
//
//   - A mapped file page is referenced through its page table (young) and
//     the kernel looks only at reclaim time: on the inactive tail a young
//     page is kept once (PG_referenced set, rotated to the head) and
//     activated when it is young again at its next scan; an old one is
//     evicted (mm/vmscan.c folio_check_references).
//
//   - A page read by an async window sits in a large folio (readahead
//     raises the order of each async window's folios), and the graph maps
//     it with its neighbours: at its first scan more than one of its
//     folio's PTEs is young, and folio_check_references activates it
//     (referenced_ptes > 1) where an order-0 page is kept once. Without
//     it a budget near the model's size kept nothing of the file between
//     tokens, where the kernel keeps part (the demo MoE at 256 MiB: the
//     model read the whole 325 MiB a decode token, runs 70–129).
//
//   - Reclaim scans both lists from their tails in proportion to their
//     sizes (mm/vmscan.c get_scan_count; the active file list is scanned
//     whenever refaults were seen since the last reclaim, as they always
//     are here): for each page the inactive tail gives up, active ÷
//     inactive pages of the active tail are moved to the inactive head,
//     their young bit cleared and PG_workingset set (shrink_active_list
//     deactivates a mapped file page referenced or not, unless it is
//     executable). So a page spends as long on the active list as on the
//     inactive one, and the inactive list is not held at half the cache:
//     a pagecache-tier run at 128 MiB showed the kernel evicting the
//     read-ahead pages no call touched 10–13 k page reads after their read
//     (of a 17 k-page cache), never under 7 k, where holding the lists
//     equal evicted them after 4–9 k and read them again in the same call.
//
//   - A fault on a missing page reads around it: a window of ra pages
//     centred on it (moved inside the file at its start), with the async
//     marker a quarter from its end; a hit on
//     a marked page reads the next window from the first missing page after
//     it, marked at its start, so a sequential scan streams ahead of its
//     faults (mm/filemap.c do_sync/async_mmap_readahead, mm/readahead.c).
//     Pages already resident in a window are skipped, as the kernel does.
//
//   - A fault first maps, around it (fault-around: the 16 pages of the
//     64 KiB block holding it), every resident page not mapped yet and not
//     the async marker (mm/filemap.c filemap_map_pages); on x86 those
//     prefaulted PTEs are young. Only when the faulting page was not among
//     them does the fault reach ->fault: a marked page starts the next
//     window, a missing one is a major fault.
//
//   - The mmap_miss back-off (mm/filemap.c, as of 6.18): each major fault
//     adds one to the file's mmap_miss (up to 1000) before it reads; above
//     MMAP_LOTSAMISS (100) it reads its page alone, no window. A fault
//     that finds its page cached takes one off, and fault-around takes one
//     per page it maps that is not PG_workingset. A major fault waits for
//     its read with the mmap lock dropped and is retried, and the retry's
//     fault-around maps the page just read: so while read pages are not
//     workingset, each miss is paid back at once and read-around stays on.
//     PG_workingset is set when the active list's tail is moved to the
//     inactive list (mm/vmscan.c shrink_active_list), kept through
//     eviction in the shadow entry and restored on a refault that passes
//     the distance test (mm/workingset.c). Linux 5.15 took one off for
//     every page fault-around mapped, workingset or not (the exception is
//     Liu Shixin's patch of 2024), so there the back-off is rarer still.
//
//   - A window larger than the cache ends where the cache is full of its
//     own pages (readahead's __GFP_NORETRY charge fails; readWindow), and
//     the fault then reads its page alone: measured bytes under a plan
//     that left 13 MiB of cache to 16 MiB windows hardly grew (qwen3moe,
//     128 MiB: 385.6 MiB a token with 38.9 MiB pinned, 387.1 with 52.1),
//     where whole windows made the model say 428.3.
//
// This is an approximation, said where it departs: reclaim runs page by
// page to the limit (the kernel reclaims in batches of 32), pages are
// read, scanned and evicted one by one (the kernel does a large folio
// whole; only its activation above is modelled), every page of
// a file shares one readahead state, the fault-around block is aligned in
// the file (the kernel aligns it in the address space; llama.cpp maps the
// file from offset 0), and the cgroup's other memory is a constant (the
// run's non-file memory). Pinned pages (a plan's) are resident, on no
// list, never evicted and count as mapped; the lists' capacity is what is
// left of the budget besides them.
type pageCache struct {
	n          int32
	capacity   int64
	ra         int32
	prev, next []int32
	where      []uint8 // listNone, listInactive, listActive, listPinned
	flags      []uint8 // flagYoung, flagRef, flagMarker, flagMapped, flagWorkingset, flagShadowWS
	shadow     []uint32
	head, tail [3]int32
	count      [3]int64
	age        uint32

	// mmapMiss is the file's f_ra.mmap_miss.
	mmapMiss int32
	// deactivate is the active pages owed to the inactive list: reclaim
	// scans the lists in proportion to their sizes.
	deactivate float64

	// claim are the pages a prefetcher is asking for while a fault reads
	// around them (simulatePrefetch's first picked slice): the helper
	// allocates them as the window does, and the window marks no page it
	// did not allocate itself.
	claim []pageRange

	readPages, majors uint64
	// reads counts the device reads the faults made: each window read
	// (sync or async) with a page in it, and each page read alone. With a
	// small window on a slow disk, their service times are the stall.
	reads uint64
	// backedOff counts the major faults that read their page alone.
	backedOff uint64
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
	flagMapped
	flagWorkingset
	// flagShadowWS is an evicted page's shadow entry's workingset bit: the
	// only flag eviction keeps.
	flagShadowWS
	// flagLarge marks a page read in a large folio: the async windows'
	// (readWindow's large).
	flagLarge
)

// The kernel's constants of mm/filemap.c and the x86 default of
// /sys/kernel/mm/... fault_around_bytes (64 KiB).
const (
	mmapLotsaMiss    = 100
	mmapMissMax      = mmapLotsaMiss * 10
	faultAroundPages = 16
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

func (c *pageCache) claimed(p int32) bool {
	for _, r := range c.claim {
		if p >= r.first && p < r.end {
			return true
		}
	}
	return false
}

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
	ws := c.flags[p]&flagShadowWS != 0
	c.flags[p] = 0
	if s := c.shadow[p]; s != 0 && int64(c.age-s) <= c.count[listActive] {
		c.age++
		if ws {
			c.flags[p] = flagWorkingset
		}
		c.pushHead(listActive, p)
		return
	}
	c.pushHead(listInactive, p)
}

// reclaim evicts to the capacity.
func (c *pageCache) reclaim() {
	for c.count[listInactive]+c.count[listActive] > c.capacity {
		if c.count[listInactive] == 0 || (c.deactivate >= 1 && c.count[listActive] > 0) {
			c.deactivate = max(c.deactivate-1, 0)
			c.toInactive(c.tail[listActive])
			continue
		}
		c.deactivate += float64(c.count[listActive]) / float64(c.count[listInactive])
		p := c.tail[listInactive]
		f := c.flags[p]
		switch {
		case f&flagYoung != 0 && (f&flagRef != 0 || f&flagLarge != 0):
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
			if f&flagWorkingset != 0 {
				c.flags[p] = flagShadowWS
			}
			c.age++
			c.shadow[p] = c.age
		}
	}
}

// readWindow reads the missing pages of [first, end) and marks page mark
// when it is one of them and no prefetcher claims it (the kernel sets
// PG_readahead only on a folio it allocates: mm/readahead.c). A window ends where the cache has no room
// left but its own pages: readahead charges each folio to the cgroup
// with __GFP_NORETRY, and a window's folios, locked under their read,
// cannot be reclaimed to make room for the next, so the charge fails and
// page_cache_ra_unbounded stops there (mm/readahead.c, mm/memcontrol.c
// try_charge_memcg). It only matters when a window is larger than the
// cache, as under a plan that leaves less cache than a window.
func (c *pageCache) readWindow(first, end, mark int32, large bool) {
	first, end = max(first, 0), min(end, c.n)
	var added int64
	defer func() {
		if added > 0 {
			c.reads++
		}
	}()
	for p := first; p < end; p++ {
		if c.resident(p) {
			continue
		}
		if added >= max(c.capacity, 1) {
			return
		}
		c.add(p)
		added++
		if large {
			c.flags[p] |= flagLarge
		}
		if p == mark && !c.claimed(p) {
			c.flags[p] |= flagMarker
		}
	}
}

// faultAround maps the resident, unmapped, unmarked pages of p's 64 KiB
// block, young, and takes one off mmap_miss for each that is not
// workingset. It says whether p itself was mapped.
func (c *pageCache) faultAround(p int32) bool {
	first := p &^ (faultAroundPages - 1)
	var n int32
	for q := first; q < min(first+faultAroundPages, c.n); q++ {
		f := c.flags[q]
		if c.where[q] == listNone || c.where[q] == listPinned || f&(flagMapped|flagMarker) != 0 {
			continue
		}
		c.flags[q] = f | flagMapped | flagYoung
		if f&flagWorkingset == 0 {
			n++
		}
	}
	c.mmapMiss = max(c.mmapMiss-n, 0)
	return c.flags[p]&flagMapped != 0
}

// touch is one access of page p.
func (c *pageCache) touch(p int32) {
	switch {
	case c.where[p] == listPinned:
		return
	case c.flags[p]&flagMapped != 0:
		c.flags[p] |= flagYoung
		return
	case c.faultAround(p):
		return
	case c.where[p] != listNone: // the marked page: ->fault finds it cached
		c.mmapMiss = max(c.mmapMiss-1, 0)
		c.flags[p] |= flagMapped | flagYoung
		if c.flags[p]&flagMarker != 0 {
			c.flags[p] &^= flagMarker
			q := p + 1
			for q < c.n && q < p+c.ra && c.resident(q) {
				q++
			}
			if q < c.n && !c.resident(q) {
				c.readWindow(q, q+c.ra, q, true)
				c.reclaim()
			}
		}
		return
	}
	c.majors++
	c.mmapMiss = min(c.mmapMiss+1, mmapMissMax)
	if c.mmapMiss > mmapLotsaMiss {
		c.backedOff++
		c.reads++
		c.add(p)
	} else {
		// Near the file's start the window moves, not shrinks: the kernel
		// reads [0, ra) for page 0 (ra->start = max(0, pgoff - ra/2)).
		start := max(p-c.ra/2, 0)
		c.readWindow(start, start+c.ra, start+c.ra-c.ra/4, false)
		if !c.resident(p) {
			// The window ended before it: filemap_fault reads the page
			// alone (__filemap_get_folio with the fault's own gfp, which
			// reclaims as long as it must).
			c.reads++
			c.add(p)
		}
	}
	// The retry after the read: fault-around maps p and its block.
	c.faultAround(p)
	c.flags[p] |= flagMapped | flagYoung
	c.reclaim()
}

// prefetch reads the missing pages of r as a prefetcher's request does
// (MADV_WILLNEED, POSIX_FADV_WILLNEED: exactly the range, no read-around,
// no fault, nothing mapped), reclaiming as it goes; it returns the pages
// it read.
func (c *pageCache) prefetch(r pageRange) uint64 {
	_, n := c.prefetchInto(r, nil)
	return n
}

// prefetchInto is prefetch, and appends the pages it read to brought.
func (c *pageCache) prefetchInto(r pageRange, brought []int32) ([]int32, uint64) {
	n0 := c.readPages
	for p := max(r.first, 0); p < r.end && p < c.n; p++ {
		if !c.resident(p) {
			c.add(p)
			brought = append(brought, p)
			c.reclaim()
		}
	}
	return brought, c.readPages - n0
}

// missingIn appends the pages of rs that are not resident to ps.
func (c *pageCache) missingIn(rs []pageRange, ps []int32) []int32 {
	for _, r := range rs {
		for p := max(r.first, 0); p < r.end && p < c.n; p++ {
			if !c.resident(p) {
				ps = append(ps, p)
			}
		}
	}
	return ps
}

// release is process_madvise(MADV_COLD) of pages ps: those still resident
// and mapped lose their young bit and PG_referenced, and an active one
// moves to the inactive head, workingset (mm/madvise.c
// madvise_cold_or_pageout_pte_range, folio_deactivate). Unmapped pages
// are in no page table, so the advice never reaches them.
func (c *pageCache) release(ps []int32) {
	for _, p := range ps {
		w := c.where[p]
		if (w != listInactive && w != listActive) || c.flags[p]&flagMapped == 0 {
			continue
		}
		c.flags[p] &^= flagYoung | flagRef
		if w == listActive {
			c.toInactive(p)
		}
	}
}

// toInactive moves active page p to the inactive head, old and
// workingset: what shrink_active_list and folio_deactivate do to a mapped
// file page.
func (c *pageCache) toInactive(p int32) {
	c.unlink(p)
	c.flags[p] = c.flags[p]&^flagYoung | flagWorkingset
	c.pushHead(listInactive, p)
}

// access reads pages [first, end) in order.
func (c *pageCache) access(r pageRange) {
	for p := max(r.first, 0); p < r.end && p < c.n; p++ {
		c.touch(p)
	}
}
