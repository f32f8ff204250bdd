package stats

import (
	"container/heap"
	"container/list"
	"math"
)

// Cache simulations over a sequence of accesses to keys (experts). Each
// returns which accesses hit; a cache starts empty and holds at most k
// keys. Misses always insert the key: an expert must be in memory to run.

// LRU evicts the least recently used key.
func LRU(seq []int, k int) []bool {
	hits := make([]bool, len(seq))
	if k <= 0 {
		return hits
	}
	order := list.New() // most recent at the front
	at := map[int]*list.Element{}
	for i, x := range seq {
		if e, ok := at[x]; ok {
			hits[i] = true
			order.MoveToFront(e)
			continue
		}
		if len(at) == k {
			delete(at, order.Remove(order.Back()).(int))
		}
		at[x] = order.PushFront(x)
	}
	return hits
}

// entry is a cached key in a priority heap.
type entry struct {
	key, a, b, idx int
}

// keyHeap orders entries by less; idx tracks each entry's place so that
// a changed priority can be fixed in O(log k).
type keyHeap struct {
	es   []*entry
	less func(x, y *entry) bool
}

func (h *keyHeap) Len() int           { return len(h.es) }
func (h *keyHeap) Less(i, j int) bool { return h.less(h.es[i], h.es[j]) }
func (h *keyHeap) Swap(i, j int) {
	h.es[i], h.es[j] = h.es[j], h.es[i]
	h.es[i].idx, h.es[j].idx = i, j
}
func (h *keyHeap) Push(x any) { e := x.(*entry); e.idx = len(h.es); h.es = append(h.es, e) }
func (h *keyHeap) Pop() any {
	e := h.es[len(h.es)-1]
	h.es = h.es[:len(h.es)-1]
	return e
}

// LFU evicts the cached key used least often so far in the whole sequence
// (counts survive eviction, as a router's activation statistics do), the
// least recently used among equals.
func LFU(seq []int, k int) []bool {
	hits := make([]bool, len(seq))
	if k <= 0 {
		return hits
	}
	freq := map[int]int{}
	in := map[int]*entry{}
	// a: uses so far, b: position of the last use.
	h := &keyHeap{less: func(x, y *entry) bool { return x.a < y.a || (x.a == y.a && x.b < y.b) }}
	for i, x := range seq {
		freq[x]++
		if e, ok := in[x]; ok {
			hits[i] = true
			e.a, e.b = freq[x], i
			heap.Fix(h, e.idx)
			continue
		}
		if len(in) == k {
			delete(in, heap.Pop(h).(*entry).key)
		}
		e := &entry{key: x, a: freq[x], b: i}
		heap.Push(h, e)
		in[x] = e
	}
	return hits
}

// Belady is the offline optimum (Belady's MIN): on a miss with a full
// cache it evicts the key whose next use lies farthest ahead, never-again
// keys first. No policy that knows only the past hits more often.
func Belady(seq []int, k int) []bool {
	hits := make([]bool, len(seq))
	if k <= 0 {
		return hits
	}
	next := make([]int, len(seq)) // position of the next use of seq[i]
	seen := map[int]int{}
	for i := len(seq) - 1; i >= 0; i-- {
		next[i] = math.MaxInt
		if p, ok := seen[seq[i]]; ok {
			next[i] = p
		}
		seen[seq[i]] = i
	}
	in := map[int]*entry{}
	// a: position of the next use (farthest on top), b: the key, for a
	// stable choice among keys never used again.
	h := &keyHeap{less: func(x, y *entry) bool { return x.a > y.a || (x.a == y.a && x.b < y.b) }}
	for i, x := range seq {
		if e, ok := in[x]; ok {
			hits[i] = true
			e.a = next[i]
			heap.Fix(h, e.idx)
			continue
		}
		if len(in) == k {
			delete(in, heap.Pop(h).(*entry).key)
		}
		e := &entry{key: x, a: next[i], b: x}
		heap.Push(h, e)
		in[x] = e
	}
	return hits
}

// ReuseDistances gives, per access, the number of distinct other keys
// used since the previous access to the same key (the LRU stack
// distance), -1 for a key's first access. An LRU cache of k keys hits
// exactly the accesses with distance < k.
func ReuseDistances(seq []int) []int {
	out := make([]int, len(seq))
	var stack []int // most recent first
	for i, x := range seq {
		d := -1
		for j, y := range stack {
			if y == x {
				d = j
				copy(stack[1:j+1], stack[:j])
				break
			}
		}
		if d < 0 {
			stack = append(stack, 0)
			copy(stack[1:], stack[:len(stack)-1])
		}
		stack[0] = x
		out[i] = d
	}
	return out
}

// CountTrue counts the set flags.
func CountTrue(b []bool) int {
	n := 0
	for _, v := range b {
		if v {
			n++
		}
	}
	return n
}

// Distinct counts the distinct keys of seq: the compulsory misses of any
// cache.
func Distinct(seq []int) int {
	m := map[int]bool{}
	for _, x := range seq {
		m[x] = true
	}
	return len(m)
}
