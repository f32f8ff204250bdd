// Package extsort sorts more records than a reader may hold: records are
// gathered in memory up to a bound, each full batch is sorted and spilled
// to an unlinked temporary file as one run, and the runs are merged. The
// read side uses it where a figure needs a run's events in an order the
// store does not keep (page events by time, fault intervals by token), so
// that its memory is the bound, not the run's length. Spilled runs are
// merged level by level (FanIn runs of one level make one of the next), so
// the runs open at once, each with its read buffer, stay a few times
// FanIn however many records are sorted.
package extsort

import (
	"bufio"
	"cmp"
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
)

// FanIn is how many runs of one level are merged into one run of the
// next: a run holds a 64 KiB read buffer while it is merged, so a merge
// of FanIn runs costs 2 MiB, and a sort of n records spilled in batches
// of b keeps at most FanIn runs per level, log_FanIn(n/b) levels (three
// for a billion records in batches of 16 Ki).
const FanIn = 32

// Codec turns a record into bytes and back. Append appends v's encoding to
// b; Decode fills v from exactly the bytes Append wrote.
type Codec[T any] struct {
	Append func(b []byte, v *T) []byte
	Decode func(b []byte, v *T) error
}

// Sorter sorts records of type T by cmp, stably: records that compare
// equal come out in the order they were added.
type Sorter[T any] struct {
	cmp    func(a, b *T) int
	codec  Codec[T]
	max    int
	buf    []T
	file   *os.File
	w      *bufio.Writer
	off    int64
	runs   []run // spilled, in the order their records were added
	fanIn  int
	enc    []byte
	idx    []int32
	n      int
	closed bool
	// size and maxBytes bound the records held by their bytes as well as
	// their number, for records whose size varies by orders of magnitude.
	size     func(v *T) int
	maxBytes int
	bytes    int
}

// New returns a sorter holding at most maxInMemory records before it
// spills a run.
func New[T any](maxInMemory int, cmp func(a, b *T) int, codec Codec[T]) *Sorter[T] {
	return &Sorter[T]{cmp: cmp, codec: codec, max: max(maxInMemory, 1), fanIn: FanIn}
}

// NewSized returns a sorter holding records of at most maxBytes in all,
// by size, before it spills a run.
func NewSized[T any](maxBytes int, size func(v *T) int, cmp func(a, b *T) int, codec Codec[T]) *Sorter[T] {
	return &Sorter[T]{cmp: cmp, codec: codec, max: math.MaxInt, fanIn: FanIn, size: size, maxBytes: max(maxBytes, 1)}
}

// run is a sorted run in the sorter's file: where, how long, and how
// many merges made it.
type run struct {
	off, n int64
	level  int
}

// Runs is how many spilled runs the sorter holds now.
func (s *Sorter[T]) Runs() int { return len(s.runs) }

// Len is how many records were added.
func (s *Sorter[T]) Len() int { return s.n }

// Add adds one record.
func (s *Sorter[T]) Add(v T) error {
	s.buf = append(s.buf, v)
	s.n++
	if s.size != nil {
		s.bytes += s.size(&v)
	}
	if len(s.buf) >= s.max || (s.size != nil && s.bytes >= s.maxBytes) {
		return s.spill()
	}
	return nil
}

func (s *Sorter[T]) spill() error {
	if s.file == nil {
		f, err := TempFile("iocorr-sort-*")
		if err != nil {
			return fmt.Errorf("sorting: %w", err)
		}
		s.file, s.w = f, bufio.NewWriterSize(f, 1<<16)
	}
	start := s.off
	for _, i := range s.order() {
		if err := s.write(&s.buf[i]); err != nil {
			return err
		}
	}
	s.runs = append(s.runs, run{off: start, n: s.off - start})
	clear(s.buf) // drop what records point to
	s.buf, s.bytes = s.buf[:0], 0
	return s.compact()
}

// order is the held records' indexes in sorted order, ties by index.
// Sorting indexes with the tie broken by index is a stable sort at the
// cost of an unstable one (pdqsort); a stable sort of the records
// themselves (insertion and symmerge) took ~4x as long, and moved them.
func (s *Sorter[T]) order() []int32 {
	s.idx = s.idx[:0]
	for i := range s.buf {
		s.idx = append(s.idx, int32(i))
	}
	slices.SortFunc(s.idx, func(a, b int32) int {
		if c := s.cmp(&s.buf[a], &s.buf[b]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return s.idx
}

// write appends one record to the file.
func (s *Sorter[T]) write(v *T) error {
	s.enc = s.codec.Append(s.enc[:0], v)
	var hdr [binary.MaxVarintLen64]byte
	n := binary.PutUvarint(hdr[:], uint64(len(s.enc)))
	if _, err := s.w.Write(hdr[:n]); err != nil {
		return fmt.Errorf("sorting: %w", err)
	}
	if _, err := s.w.Write(s.enc); err != nil {
		return fmt.Errorf("sorting: %w", err)
	}
	s.off += int64(n + len(s.enc))
	return nil
}

// compact merges the last fanIn runs into one of the next level while
// they are of one level, as often as that holds. Runs of a level are the
// latest of their level and contiguous, so the merged run takes their
// place in the order of addition and the sort stays stable. Their bytes
// are given back to the file system (a hole), where it can.
func (s *Sorter[T]) compact() error {
	for len(s.runs) >= s.fanIn {
		last := s.runs[len(s.runs)-s.fanIn:]
		level := last[0].level
		if slices.ContainsFunc(last, func(r run) bool { return r.level != level }) {
			return nil
		}
		if err := s.w.Flush(); err != nil {
			return fmt.Errorf("sorting: %w", err)
		}
		start := s.off
		if err := s.merge(last, s.write); err != nil {
			return err
		}
		for _, r := range last {
			punchHole(s.file, r.off, r.n)
		}
		s.runs = append(s.runs[:len(s.runs)-s.fanIn], run{off: start, n: s.off - start, level: level + 1})
	}
	return nil
}

// Close releases the sorter's memory and temporary file.
func (s *Sorter[T]) Close() error {
	s.buf, s.closed = nil, true
	if s.file != nil {
		err := s.file.Close()
		s.file = nil
		return err
	}
	return nil
}

// Each calls fn for every record in order; v is valid only during the
// call. It may be called once.
func (s *Sorter[T]) Each(fn func(v *T) error) error {
	if s.closed {
		return errors.New("sorting: sorter already closed")
	}
	defer s.Close()
	if s.file == nil {
		for _, i := range s.order() {
			if err := fn(&s.buf[i]); err != nil {
				return err
			}
		}
		return nil
	}
	if len(s.buf) > 0 {
		if err := s.spill(); err != nil {
			return err
		}
	}
	if err := s.w.Flush(); err != nil {
		return fmt.Errorf("sorting: %w", err)
	}
	s.buf = nil
	return s.merge(s.runs, fn)
}

// merge calls fn for every record of runs in order; of equal records, the
// earlier run's first.
func (s *Sorter[T]) merge(runs []run, fn func(v *T) error) error {
	m := &merge[T]{cmp: s.cmp}
	for i, r := range runs {
		rd := &runReader[T]{idx: i, r: bufio.NewReaderSize(io.NewSectionReader(s.file, r.off, r.n), 1<<16), codec: s.codec}
		ok, err := rd.next()
		if err != nil {
			return err
		}
		if ok {
			m.h = append(m.h, rd)
		}
	}
	heap.Init(m)
	for len(m.h) > 0 {
		top := m.h[0]
		if err := fn(&top.cur); err != nil {
			return err
		}
		ok, err := top.next()
		if err != nil {
			return err
		}
		if ok {
			heap.Fix(m, 0)
		} else {
			heap.Pop(m)
		}
	}
	return nil
}

// runReader reads one spilled run, one record ahead.
type runReader[T any] struct {
	idx   int
	r     *bufio.Reader
	codec Codec[T]
	b     []byte
	cur   T
}

func (rd *runReader[T]) next() (bool, error) {
	n, err := binary.ReadUvarint(rd.r)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("sorting: reading a run: %w", err)
	}
	if uint64(cap(rd.b)) < n {
		rd.b = make([]byte, n)
	}
	rd.b = rd.b[:n]
	if _, err := io.ReadFull(rd.r, rd.b); err != nil {
		return false, fmt.Errorf("sorting: reading a run: %w", err)
	}
	var zero T
	rd.cur = zero
	if err := rd.codec.Decode(rd.b, &rd.cur); err != nil {
		return false, fmt.Errorf("sorting: %w", err)
	}
	return true, nil
}

// merge is a heap of runs by their next record; ties go to the earlier
// run, which keeps the sort stable.
type merge[T any] struct {
	cmp func(a, b *T) int
	h   []*runReader[T]
}

func (m *merge[T]) Len() int { return len(m.h) }
func (m *merge[T]) Less(i, j int) bool {
	if c := m.cmp(&m.h[i].cur, &m.h[j].cur); c != 0 {
		return c < 0
	}
	return m.h[i].idx < m.h[j].idx
}
func (m *merge[T]) Swap(i, j int) { m.h[i], m.h[j] = m.h[j], m.h[i] }
func (m *merge[T]) Push(x any)    { m.h = append(m.h, x.(*runReader[T])) }
func (m *merge[T]) Pop() any {
	x := m.h[len(m.h)-1]
	m.h = m.h[:len(m.h)-1]
	return x
}

// TempFile creates a temporary file (os.CreateTemp's pattern) and unlinks
// it at once: what a reader keeps aside is gone when it is killed.
func TempFile(pattern string) (*os.File, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}
