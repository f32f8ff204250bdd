package stats

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"

	"github.com/iocorr/iocorr/internal/extsort"
)

// tokenSnaps keeps each token's resident pages by tensor outside memory,
// in an unlinked temporary file: the residency table has a row per token
// × tensor, and holding its snapshots took 8 bytes × tensors a token and
// its rows ~80 bytes a cell (export stats grew 18 KB a token on a model
// of 24 × 64 experts). What stays in memory is 12 bytes a token.
type tokenSnaps struct {
	f   *os.File
	w   *bufio.Writer
	off []int64  // by token index
	len []uint32 // 0: no snapshot of this token
	end int64
	buf []byte
}

func newTokenSnaps(tokens int) *tokenSnaps {
	return &tokenSnaps{off: make([]int64, tokens), len: make([]uint32, tokens)}
}

// put keeps token ti's counts (one per tensor id); a later put of the
// same token replaces the earlier.
func (s *tokenSnaps) put(ti int, counts []int64) error {
	if s.f == nil {
		f, err := extsort.TempFile("iocorr-residency-*")
		if err != nil {
			return fmt.Errorf("keeping residency snapshots: %w", err)
		}
		s.f, s.w = f, bufio.NewWriterSize(f, 1<<16)
	}
	s.buf = s.buf[:0]
	for _, c := range counts {
		s.buf = binary.AppendUvarint(s.buf, uint64(c))
	}
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("keeping residency snapshots: %w", err)
	}
	s.off[ti], s.len[ti] = s.end, uint32(len(s.buf))
	s.end += int64(len(s.buf))
	return nil
}

// get reads token ti's counts into into (one per tensor id); false when
// the token has no snapshot.
func (s *tokenSnaps) get(ti int, into []int64) (bool, error) {
	if s.len[ti] == 0 {
		return false, nil
	}
	if s.w.Buffered() > 0 {
		if err := s.w.Flush(); err != nil {
			return false, fmt.Errorf("keeping residency snapshots: %w", err)
		}
	}
	s.buf = append(s.buf[:0], make([]byte, s.len[ti])...)
	if _, err := s.f.ReadAt(s.buf, s.off[ti]); err != nil {
		return false, fmt.Errorf("reading residency snapshots: %w", err)
	}
	b := s.buf
	for i := range into {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return false, fmt.Errorf("reading residency snapshots: token %d holds %d of %d counts", ti, i, len(into))
		}
		into[i], b = int64(v), b[n:]
	}
	return true, nil
}

// Close drops the file.
func (s *tokenSnaps) Close() error {
	if s == nil || s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
