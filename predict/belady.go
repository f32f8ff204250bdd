package predict

import "math"

// belady is the offline bound over the same stream: each page read only
// when it is missing, the resident page used again farthest ahead evicted
// (ties, pages never used again, the lowest first). A prefetch can never
// read fewer pages than demand paging under this choice, so no readahead
// reads fewer bytes. Faults count each run of consecutive missing pages
// of one read once (an ideal read-around).
//
// The stream is never written out page by page (a 64-token run of a 17
// GiB model is 200 M page accesses): it is the load and each call's
// ranges, and a page's next use is found from the ranges that hold it,
// each with a cursor on its own reads. Memory is a few words per page of
// the file and per range read, whatever the run's length.
func (r *Run) belady(capacity int64) phaseCounts {
	out := newCounts()
	b := newBeladyStream(r)
	n := r.pages
	capacity = min(capacity, int64(n))
	if capacity <= 0 {
		return out
	}
	h := beladyHeap{key: make([]int64, n), at: make([]int32, n)}
	for p := range h.at {
		h.at[p] = -1
	}
	access := func(p int32, nextUse int64) bool {
		if h.at[p] >= 0 {
			h.key[p] = nextUse
			h.fix(h.at[p])
			return true
		}
		if int64(len(h.pages)) == capacity {
			h.pop()
		}
		h.key[p] = nextUse
		h.push(p)
		return false
	}
	load := r.load()
	for p := max(load.first, 0); p < min(load.end, n); p++ {
		access(p, b.next(p))
	}
	for k, rd := range b.reads {
		d := b.ranges[rd.id]
		b.cursor[rd.id]++
		c := out[b.phase[k]]
		prevHit := true
		for p := d.first; p < d.end; p++ {
			hit := access(p, b.next(p))
			if !hit {
				c[0] += pageSize
				if prevHit {
					c[1]++
				}
			}
			prevHit = hit
		}
	}
	return out
}

// beladyStream is a run's calls as range reads: each distinct range once,
// the reads of each in order, and the ranges holding each page.
type beladyStream struct {
	ranges []pageRange
	reads  []struct {
		id  int32
		pos int64 // the stream position of its first page
	}
	phase   []uint8
	readsOf [][]int32 // by range: its reads, in order
	cursor  []int32   // by range: its first read not yet begun
	// cover[coverAt[p]:coverAt[p+1]] are the ranges holding page p.
	coverAt []int32
	cover   []int32
}

func newBeladyStream(r *Run) *beladyStream {
	b := &beladyStream{}
	id := map[pageRange]int32{}
	load := r.load()
	pos := int64(max(min(load.end, r.pages)-max(load.first, 0), 0))
	for _, cl := range r.calls {
		for _, rg := range cl.reads {
			rg = pageRange{max(rg.first, 0), min(rg.end, r.pages)}
			if rg.first >= rg.end {
				continue
			}
			d, ok := id[rg]
			if !ok {
				d = int32(len(b.ranges))
				id[rg] = d
				b.ranges = append(b.ranges, rg)
				b.readsOf = append(b.readsOf, nil)
			}
			b.readsOf[d] = append(b.readsOf[d], int32(len(b.reads)))
			b.reads = append(b.reads, struct {
				id  int32
				pos int64
			}{d, pos})
			b.phase = append(b.phase, cl.phase)
			pos += int64(rg.end - rg.first)
		}
	}
	b.cursor = make([]int32, len(b.ranges))
	b.coverAt = make([]int32, r.pages+1)
	for _, d := range b.ranges {
		for p := d.first; p < d.end; p++ {
			b.coverAt[p+1]++
		}
	}
	for p := range r.pages {
		b.coverAt[p+1] += b.coverAt[p]
	}
	b.cover = make([]int32, b.coverAt[r.pages])
	fill := make([]int32, r.pages)
	for i, d := range b.ranges {
		for p := d.first; p < d.end; p++ {
			b.cover[b.coverAt[p]+fill[p]] = int32(i)
			fill[p]++
		}
	}
	return b
}

// next is the stream position of page p's next use after the reads begun
// so far (math.MaxInt64 for none).
func (b *beladyStream) next(p int32) int64 {
	best := int64(math.MaxInt64)
	for _, d := range b.cover[b.coverAt[p]:b.coverAt[p+1]] {
		if c := b.cursor[d]; int(c) < len(b.readsOf[d]) {
			best = min(best, b.reads[b.readsOf[d][c]].pos+int64(p-b.ranges[d].first))
		}
	}
	return best
}

// beladyHeap holds the resident pages, the one used again farthest ahead
// on top (of equals, the lowest page).
type beladyHeap struct {
	pages []int32
	key   []int64 // by page: its next use
	at    []int32 // by page: its index in pages, -1 when not resident
}

func (h *beladyHeap) before(i, j int32) bool {
	a, b := h.pages[i], h.pages[j]
	return h.key[a] > h.key[b] || (h.key[a] == h.key[b] && a < b)
}

func (h *beladyHeap) swap(i, j int32) {
	h.pages[i], h.pages[j] = h.pages[j], h.pages[i]
	h.at[h.pages[i]], h.at[h.pages[j]] = i, j
}

func (h *beladyHeap) up(i int32) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.before(i, parent) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

func (h *beladyHeap) down(i int32) {
	n := int32(len(h.pages))
	for {
		top, l, r := i, 2*i+1, 2*i+2
		if l < n && h.before(l, top) {
			top = l
		}
		if r < n && h.before(r, top) {
			top = r
		}
		if top == i {
			return
		}
		h.swap(i, top)
		i = top
	}
}

func (h *beladyHeap) fix(i int32) {
	h.up(i)
	h.down(i)
}

func (h *beladyHeap) push(p int32) {
	h.pages = append(h.pages, p)
	h.at[p] = int32(len(h.pages) - 1)
	h.up(h.at[p])
}

func (h *beladyHeap) pop() {
	last := int32(len(h.pages) - 1)
	p := h.pages[0]
	h.swap(0, last)
	h.pages = h.pages[:last]
	h.at[p] = -1
	if last > 0 {
		h.down(0)
	}
}
