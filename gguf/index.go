package gguf

import (
	"fmt"
	"sort"
)

// Span is one tensor's bytes in a file, as an OffsetIndex needs them.
// Tensor is what lookups return for it: a *Tensor for a parsed File, a
// tensor id for a tensor table recorded elsewhere (correlate's).
type Span[T any] struct {
	Tensor     T
	Offset     int64 // in the file
	Size       int64
	Experts    int   // > 0 for *_exps tensors
	ExpertSize int64 // bytes per expert when Experts > 0
}

// OffsetIndex maps file offsets to tensors. Ranges are disjoint, so a
// sorted array of starts and a binary search answer every query; the
// parallel arrays keep the search on two dense []int64 rather than chasing
// pointers, and no lookup allocates.
type OffsetIndex[T any] struct {
	starts  []int64
	ends    []int64
	experts []int
	strides []int64
	tensors []T
}

// NewOffsetIndex indexes spans. Spans of no bytes hold nothing and are
// left out; negative offsets or sizes, experts without a size, and
// overlapping spans are errors (the spans may come from untrusted files).
func NewOffsetIndex[T any](spans []Span[T]) (*OffsetIndex[T], error) {
	order := make([]int, 0, len(spans))
	for i := range spans {
		s := &spans[i]
		if s.Offset < 0 || s.Size < 0 || s.Offset+s.Size < s.Offset {
			return nil, fmt.Errorf("tensor %d: bad byte range at %d of %d bytes", i, s.Offset, s.Size)
		}
		if s.Size > 0 && s.Experts > 0 && s.ExpertSize <= 0 {
			return nil, fmt.Errorf("tensor %d: %d experts but no expert size", i, s.Experts)
		}
		if s.Size > 0 {
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return spans[order[a]].Offset < spans[order[b]].Offset })
	ix := &OffsetIndex[T]{
		starts:  make([]int64, len(order)),
		ends:    make([]int64, len(order)),
		experts: make([]int, len(order)),
		strides: make([]int64, len(order)),
		tensors: make([]T, len(order)),
	}
	for k, i := range order {
		s := &spans[i]
		if k > 0 && s.Offset < ix.ends[k-1] {
			return nil, fmt.Errorf("tensors %d and %d overlap", order[k-1], i)
		}
		ix.starts[k], ix.ends[k] = s.Offset, s.Offset+s.Size
		ix.experts[k], ix.strides[k] = s.Experts, s.ExpertSize
		ix.tensors[k] = s.Tensor
	}
	return ix, nil
}

// find returns the position of the last tensor starting at or before
// off, or -1. Hand-written rather than sort.Search so that the hot path
// has no closure.
func (ix *OffsetIndex[T]) find(off int64) int {
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

// IndexHit is where one file offset falls.
type IndexHit[T any] struct {
	Tensor T
	// Expert is the expert whose slice holds the offset for *_exps
	// tensors, -1 otherwise.
	Expert int
	// Offset is the offset within the tensor (not within the expert).
	Offset int64
}

// Lookup finds the tensor holding byte off. It is false for bytes outside
// every tensor (header, alignment padding, past the last tensor).
func (ix *OffsetIndex[T]) Lookup(off int64) (IndexHit[T], bool) {
	i := ix.find(off)
	if i < 0 || off >= ix.ends[i] {
		return IndexHit[T]{Expert: -1}, false
	}
	rel := off - ix.starts[i]
	e := -1
	if ix.experts[i] > 0 {
		e = int(rel / ix.strides[i])
	}
	return IndexHit[T]{Tensor: ix.tensors[i], Expert: e, Offset: rel}, true
}

// IndexSlice is a run of bytes of a file range that belongs to one tensor
// (or one expert of an expert tensor), or to no tensor at all.
type IndexSlice[T any] struct {
	// Tensor is T's zero value (nil for a *Tensor) for bytes outside every
	// tensor: header, padding between tensors, past the last tensor.
	Tensor T
	// Outside is set for those bytes.
	Outside bool
	// Expert is the expert for *_exps tensors, -1 otherwise.
	Expert int
	// FileOffset is where the slice starts in the file; Offset is where
	// it starts within the tensor (0 outside every tensor).
	FileOffset int64
	Offset     int64
	Len        int64
}

// AppendSlices appends to dst the slices that the file range [off, off+n)
// consists of, in file order, and returns the extended slice. Tensor bytes
// are split at tensor and expert boundaries; runs of bytes outside every
// tensor are one slice each. The lengths add up to n. Reusing dst
// (dst = ix.AppendSlices(dst[:0], ...)) makes it allocation-free.
func (ix *OffsetIndex[T]) AppendSlices(dst []IndexSlice[T], off, n int64) []IndexSlice[T] {
	if n <= 0 {
		return dst
	}
	end := off + n
	if end < off { // overflow: clamp, a range cannot extend past int64
		end = 1<<63 - 1
	}
	i := ix.find(off)
	if i >= 0 && off >= ix.ends[i] {
		i++ // off is in the gap after tensor i
	} else if i < 0 {
		i = 0
	}
	for off < end {
		if i >= len(ix.starts) {
			dst = append(dst, IndexSlice[T]{Outside: true, Expert: -1, FileOffset: off, Len: end - off})
			break
		}
		if off < ix.starts[i] {
			gapEnd := min(ix.starts[i], end)
			dst = append(dst, IndexSlice[T]{Outside: true, Expert: -1, FileOffset: off, Len: gapEnd - off})
			off = gapEnd
			continue
		}
		start, tEnd := ix.starts[i], min(ix.ends[i], end)
		if ix.experts[i] == 0 {
			dst = append(dst, IndexSlice[T]{Tensor: ix.tensors[i], Expert: -1, FileOffset: off, Offset: off - start, Len: tEnd - off})
			off = tEnd
		} else {
			for off < tEnd {
				rel := off - start
				e := rel / ix.strides[i]
				eEnd := min(start+(e+1)*ix.strides[i], tEnd)
				dst = append(dst, IndexSlice[T]{Tensor: ix.tensors[i], Expert: int(e), FileOffset: off, Offset: rel, Len: eEnd - off})
				off = eEnd
			}
		}
		i++
	}
	return dst
}

// Hit is where one offset of a File falls.
type Hit = IndexHit[*Tensor]

// Slice is a run of a File's bytes in one tensor, expert, or none.
type Slice = IndexSlice[*Tensor]

// buildIndex indexes a parsed file's tensors; the parser has rejected
// every range NewOffsetIndex would.
func buildIndex(ts []*Tensor) (*OffsetIndex[*Tensor], []*Tensor, error) {
	spans := make([]Span[*Tensor], len(ts))
	for i, t := range ts {
		spans[i] = Span[*Tensor]{Tensor: t, Offset: t.FileOffset, Size: t.Size, Experts: t.Experts, ExpertSize: t.ExpertSize}
	}
	ix, err := NewOffsetIndex(spans)
	if err != nil {
		return nil, nil, err
	}
	byOffset := make([]*Tensor, len(ts))
	copy(byOffset, ts)
	sort.SliceStable(byOffset, func(i, j int) bool { return byOffset[i].FileOffset < byOffset[j].FileOffset })
	return ix, byOffset, nil
}

// Lookup finds the tensor holding byte off of the file. It is false for
// bytes of the header, of alignment padding, and past the last tensor.
// It does not allocate.
func (f *File) Lookup(off int64) (Hit, bool) { return f.index.Lookup(off) }

// AppendSlices appends to dst the slices that the file range
// [off, off+n) consists of (see OffsetIndex.AppendSlices); Tensor is nil
// for bytes outside every tensor. Reusing dst makes it allocation-free.
func (f *File) AppendSlices(dst []Slice, off, n int64) []Slice {
	return f.index.AppendSlices(dst, off, n)
}

// TensorsByOffset returns the tensors in file order. The slice is shared:
// do not modify it.
func (f *File) TensorsByOffset() []*Tensor { return f.byOffset }
