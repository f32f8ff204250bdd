package stats

import "math"

// Cache simulations over a sequence of accesses to keys (experts). Each
// returns which accesses hit; a cache starts empty and holds at most k
// keys. Misses always insert the key: an expert must be in memory to run.

// LRU evicts the least recently used key.
func LRU(seq []int, k int) []bool {
	hits := make([]bool, len(seq))
	if k <= 0 {
		return hits
	}
	last := map[int]int{} // key in cache → position of its last use
	for i, x := range seq {
		if _, ok := last[x]; ok {
			hits[i] = true
		} else if len(last) == k {
			victim, oldest := 0, math.MaxInt
			for y, p := range last {
				if p < oldest {
					victim, oldest = y, p
				}
			}
			delete(last, victim)
		}
		last[x] = i
	}
	return hits
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
	last := map[int]int{}
	in := map[int]bool{}
	for i, x := range seq {
		freq[x]++
		if in[x] {
			hits[i] = true
		} else {
			if len(in) == k {
				victim, vf, vl := 0, math.MaxInt, math.MaxInt
				for y := range in {
					if f, l := freq[y], last[y]; f < vf || (f == vf && l < vl) {
						victim, vf, vl = y, f, l
					}
				}
				delete(in, victim)
			}
			in[x] = true
		}
		last[x] = i
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
	in := map[int]int{} // key in cache → position of its next use
	for i, x := range seq {
		if _, ok := in[x]; ok {
			hits[i] = true
		} else if len(in) == k {
			victim, far := 0, -1
			for y, n := range in {
				if n > far || (n == far && y < victim) {
					victim, far = y, n
				}
			}
			delete(in, victim)
		}
		in[x] = next[i]
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
