package gguf

import "sort"

// index maps file offsets to tensors. Ranges are disjoint (the parser
// rejects overlaps), so a sorted array of starts and a binary search
// answer every query; the parallel arrays keep the search on two dense
// []int64 rather than chasing *Tensor pointers.
type index struct {
	starts  []int64
	ends    []int64
	tensors []*Tensor
}

func buildIndex(ts []*Tensor) index {
	sorted := make([]*Tensor, len(ts))
	copy(sorted, ts)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].FileOffset < sorted[j].FileOffset })
	ix := index{
		starts:  make([]int64, len(sorted)),
		ends:    make([]int64, len(sorted)),
		tensors: sorted,
	}
	for i, t := range sorted {
		ix.starts[i] = t.FileOffset
		ix.ends[i] = t.End()
	}
	return ix
}

// find returns the position of the last tensor starting at or before
// off, or -1. Hand-written rather than sort.Search so that the hot path
// has no closure.
func (ix *index) find(off int64) int {
	lo, hi := 0, len(ix.starts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if ix.starts[m] <= off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo - 1
}

// Hit is where one file offset falls.
type Hit struct {
	Tensor *Tensor
	// Expert is the expert whose slice holds the offset for *_exps
	// tensors, -1 otherwise.
	Expert int
	// Offset is the offset within the tensor (not within the expert).
	Offset int64
}

// Lookup finds the tensor holding byte off of the file. It is false for
// bytes of the header, of alignment padding, and past the last tensor.
// It does not allocate.
func (f *File) Lookup(off int64) (Hit, bool) {
	i := f.index.find(off)
	if i < 0 || off >= f.index.ends[i] {
		return Hit{Expert: -1}, false
	}
	t := f.index.tensors[i]
	rel := off - t.FileOffset
	e := -1
	if t.Experts > 0 {
		e = int(rel / t.ExpertSize)
	}
	return Hit{Tensor: t, Expert: e, Offset: rel}, true
}

// Slice is a run of bytes of a file range that belongs to one tensor (or
// one expert of an expert tensor), or to no tensor at all.
type Slice struct {
	// Tensor is nil for bytes outside every tensor: header, padding
	// between tensors, and anything past the last tensor.
	Tensor *Tensor
	// Expert is the expert for *_exps tensors, -1 otherwise.
	Expert int
	// FileOffset is where the slice starts in the file; Offset is where
	// it starts within the tensor (0 when Tensor is nil).
	FileOffset int64
	Offset     int64
	Len        int64
}

// AppendSlices appends to dst the slices that the file range
// [off, off+n) consists of, in file order, and returns the extended
// slice. Tensor bytes are split at tensor and expert boundaries; runs of
// non-tensor bytes are one slice each. The lengths add up to n. Reusing
// dst (dst = f.AppendSlices(dst[:0], ...)) makes it allocation-free.
func (f *File) AppendSlices(dst []Slice, off, n int64) []Slice {
	if n <= 0 {
		return dst
	}
	end := off + n
	if end < off { // overflow: clamp, a range cannot extend past int64
		end = 1<<63 - 1
	}
	ix := &f.index
	i := ix.find(off)
	if i >= 0 && off >= ix.ends[i] {
		i++ // off is in the gap after tensor i
	} else if i < 0 {
		i = 0
	}
	for off < end {
		if i >= len(ix.starts) {
			dst = append(dst, Slice{Expert: -1, FileOffset: off, Len: end - off})
			break
		}
		if off < ix.starts[i] {
			gapEnd := min(ix.starts[i], end)
			dst = append(dst, Slice{Expert: -1, FileOffset: off, Len: gapEnd - off})
			off = gapEnd
			continue
		}
		t := ix.tensors[i]
		tEnd := min(ix.ends[i], end)
		if t.Experts == 0 {
			dst = append(dst, Slice{Tensor: t, Expert: -1, FileOffset: off, Offset: off - t.FileOffset, Len: tEnd - off})
			off = tEnd
		} else {
			for off < tEnd {
				rel := off - t.FileOffset
				e := rel / t.ExpertSize
				eEnd := min(t.FileOffset+(e+1)*t.ExpertSize, tEnd)
				dst = append(dst, Slice{Tensor: t, Expert: int(e), FileOffset: off, Offset: rel, Len: eEnd - off})
				off = eEnd
			}
		}
		i++
	}
	return dst
}

// TensorsByOffset returns the tensors in file order. The slice is shared:
// do not modify it.
func (f *File) TensorsByOffset() []*Tensor { return f.index.tensors }
