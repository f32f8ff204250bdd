package correlate

import (
	"fmt"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
)

// slice is a run of a file range inside one tensor (or expert).
type slice struct {
	tensor uint32
	expert int16
	off    int64 // offset within the tensor (within the file for pseudo)
	file   int64 // offset within the file (the disk byte for unmapped device bytes)
	n      int64
}

// pagesFrom is how many pages start inside the slice: charging each page
// to the tensor holding its first byte makes per-tensor page counts add up
// to the folio's, even where a page straddles two tensors.
func (s *slice) pagesFrom() uint64 {
	first := (s.file + kernel.PageSize - 1) / kernel.PageSize
	end := (s.file + s.n + kernel.PageSize - 1) / kernel.PageSize
	return uint64(end - first)
}

// modelIndex maps offsets of one model file to tensor ids, through
// gguf's offset index built from the run's tensor table, and disk bytes to
// file offsets through the file's extents.
type modelIndex struct {
	dev uint32
	ino uint64
	kernel.DiskMap
	tensors *gguf.OffsetIndex[uint32]
	scratch []gguf.IndexSlice[uint32] // reused by appendSlices
	// beneath: the files the model's disk is stacked on (loop devices'
	// backing files), where its requests are read again.
	beneath []kernel.DiskMap
}

func newModelIndex(m *rundir.ModelFile, firstID uint32) (*modelIndex, error) {
	spans := make([]gguf.Span[uint32], len(m.Tensors))
	for i := range m.Tensors {
		t := &m.Tensors[i]
		spans[i] = gguf.Span[uint32]{Tensor: firstID + uint32(i), Offset: t.Offset, Size: t.Size, Experts: t.Experts, ExpertSize: t.ExpertStride}
	}
	ix, err := gguf.NewOffsetIndex(spans)
	if err != nil {
		return nil, fmt.Errorf("model %s: %w", m.Path, err)
	}
	mi := &modelIndex{dev: m.Dev, ino: m.Ino, DiskMap: kernel.NewDiskMap(&m.Block, m.Extents), tensors: ix}
	for i := range m.Beneath {
		mi.beneath = append(mi.beneath, kernel.NewDiskMap(&m.Beneath[i].Block, m.Beneath[i].Extents))
	}
	return mi, nil
}

// lookup is the tensor slice holding byte off (n = 1).
func (mi *modelIndex) lookup(off int64) slice {
	h, ok := mi.tensors.Lookup(off)
	if !ok {
		return slice{tensor: event.TensorModelMeta, expert: -1, off: off, file: off, n: 1}
	}
	return slice{tensor: h.Tensor, expert: int16(h.Expert), off: h.Offset, file: off, n: 1}
}

// appendSlices cuts the file range [off, off+n) at tensor and expert
// boundaries; the lengths add up to n. Bytes outside every tensor go to
// [model header], adjacent runs of them merged.
func (mi *modelIndex) appendSlices(dst []slice, off, n int64) []slice {
	mi.scratch = mi.tensors.AppendSlices(mi.scratch[:0], off, n)
	for _, s := range mi.scratch {
		if s.Outside {
			dst = appendMerge(dst, slice{tensor: event.TensorModelMeta, expert: -1, off: s.FileOffset, file: s.FileOffset, n: s.Len})
			continue
		}
		dst = append(dst, slice{tensor: s.Tensor, expert: int16(s.Expert), off: s.Offset, file: s.FileOffset, n: s.Len})
	}
	return dst
}

// appendMerge appends s, merging it into the previous non-tensor slice so
// that header bytes on both sides of nothing stay one slice.
func appendMerge(dst []slice, s slice) []slice {
	if k := len(dst) - 1; k >= 0 && dst[k].tensor == s.tensor && s.tensor < event.FirstTensor && dst[k].off+dst[k].n == s.off {
		dst[k].n += s.n
		return dst
	}
	return append(dst, s)
}

// readBeneath says whether a request starting at byte d of disk dev reads
// a file the model's disk is stacked on: a request of the disk above,
// read again.
func (mi *modelIndex) readBeneath(dev uint32, d uint64) bool {
	for i := range mi.beneath {
		if mi.beneath[i].Holds(dev, d) {
			return true
		}
	}
	return false
}

// appendDiskSlices cuts the disk byte range [d, d+n) into this model's
// tensor slices through its partition start and FIEMAP extents, and
// returns how many of the bytes lie in the model's extents and whether
// the first slice it appended holds byte d.
func (mi *modelIndex) appendDiskSlices(dst []slice, d, n uint64) (_ []slice, inside uint64, first bool) {
	end := d + n
	if end <= mi.PartOff || len(mi.Extents) == 0 {
		return dst, 0, false
	}
	p, pend := max(d, mi.PartOff)-mi.PartOff, end-mi.PartOff
	i := mi.ExtentFrom(p)
	first = d >= mi.PartOff && i < len(mi.Extents) && mi.Extents[i].Physical <= p
	for ; p < pend && i < len(mi.Extents); i++ {
		e := mi.Extents[i]
		if e.Physical >= pend {
			break
		}
		p = max(p, e.Physical)
		stop := min(pend, e.Physical+e.Length)
		dst = mi.appendSlices(dst, int64(e.Logical+(p-e.Physical)), int64(stop-p))
		inside += stop - p
		p = stop
	}
	return dst, inside, first
}
