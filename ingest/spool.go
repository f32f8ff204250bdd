// Package ingest turns what the BPF programs put in the ring buffer into
// events: it reads the ring buffer while a run is recorded, keeps the raw
// records in a spool file, and decodes the spool into typed events.
package ingest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/iocorr/iocorr/wire"
)

// The spool is a file header followed by frames. Each frame is
//
//	u16 sync | u16 length | u32 crc32c(payload) | payload
//
// little endian, where the payload is one ring-buffer record verbatim.
// The file header is the magic, the spool's version and the records'
// layout (wire.Layout): records are C structs verbatim, so a spool is
// read only by an iocorr whose structs are the writer's.
// The sync word and the checksum let a reader stop cleanly at a torn tail
// (a crash, a full disk) and step over a damaged frame instead of
// misreading everything after it.
const (
	spoolMagic     = "IOCSPOOL"
	spoolVersion   = 2
	spoolHeaderLen = 16
	frameSync      = 0xE5C0
	frameHeaderLen = 8
	// MaxRecord bounds a payload; the largest BPF event is far below it.
	MaxRecord = 4096
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// SpoolWriter appends records to a spool file. It is not safe for
// concurrent use: one goroutine drains the ring buffer into it.
type SpoolWriter struct {
	f       *os.File
	w       *bufio.Writer
	hdr     [frameHeaderLen]byte
	records uint64
	bytes   uint64
	err     error
}

// CreateSpool creates a new spool file; it refuses to overwrite one.
func CreateSpool(path string) (*SpoolWriter, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, fmt.Errorf("creating spool: %w", err)
	}
	var h [spoolHeaderLen]byte
	copy(h[:], spoolMagic)
	binary.LittleEndian.PutUint32(h[8:], spoolVersion)
	binary.LittleEndian.PutUint32(h[12:], wire.Layout)
	if _, err := f.Write(h[:]); err != nil {
		f.Close()
		return nil, fmt.Errorf("writing spool header: %w", err)
	}
	return &SpoolWriter{f: f, w: bufio.NewWriterSize(f, 1<<20), bytes: spoolHeaderLen}, nil
}

// Write appends one record. After the first error (a full disk) every
// later call returns it: the caller stops and finalizes what was written.
func (s *SpoolWriter) Write(rec []byte) error {
	if s.err != nil {
		return s.err
	}
	if len(rec) == 0 || len(rec) > MaxRecord {
		return fmt.Errorf("spool: record of %d bytes out of range", len(rec))
	}
	binary.LittleEndian.PutUint16(s.hdr[0:], frameSync)
	binary.LittleEndian.PutUint16(s.hdr[2:], uint16(len(rec)))
	binary.LittleEndian.PutUint32(s.hdr[4:], crc32.Checksum(rec, castagnoli))
	if _, err := s.w.Write(s.hdr[:]); err != nil {
		s.err = fmt.Errorf("writing spool: %w", err)
		return s.err
	}
	if _, err := s.w.Write(rec); err != nil {
		s.err = fmt.Errorf("writing spool: %w", err)
		return s.err
	}
	s.records++
	s.bytes += uint64(frameHeaderLen + len(rec))
	return nil
}

// WriteSpool writes a whole spool of recs to path at once: a run replayed
// from known records.
func WriteSpool(path string, recs [][]byte) error {
	w, err := CreateSpool(path)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := w.Write(r); err != nil {
			w.Close()
			return err
		}
	}
	return w.Close()
}

// Flush pushes buffered records to the file, so that a crash of iocorr
// itself loses at most what arrived since the last flush.
func (s *SpoolWriter) Flush() error {
	if s.err != nil {
		return s.err
	}
	if err := s.w.Flush(); err != nil {
		s.err = fmt.Errorf("writing spool: %w", err)
	}
	return s.err
}

// Records and Bytes report what was written so far.
func (s *SpoolWriter) Records() uint64 { return s.records }
func (s *SpoolWriter) Bytes() uint64   { return s.bytes }

// Close flushes, syncs and closes the file. It reports the first error
// seen, including one from an earlier Write.
func (s *SpoolWriter) Close() error {
	ferr := s.Flush()
	serr := s.f.Sync()
	cerr := s.f.Close()
	switch {
	case ferr != nil:
		return ferr
	case serr != nil:
		return fmt.Errorf("syncing spool: %w", serr)
	case cerr != nil:
		return fmt.Errorf("closing spool: %w", cerr)
	}
	return nil
}

// SpoolStats says what a reader met besides good records.
type SpoolStats struct {
	Records      uint64
	BadFrames    uint64 // frames whose checksum or length was wrong, skipped
	SkippedBytes uint64 // bytes stepped over to find the next frame
	TornTail     uint64 // bytes at the end too short to be a whole frame
}

// ErrNotSpool is returned for a file that does not start with the spool header.
var ErrNotSpool = errors.New("not an iocorr spool")

// ErrOtherLayout is returned for a spool another iocorr wrote, whose
// records this one would misread.
var ErrOtherLayout = errors.New("spool written by another iocorr")

// SpoolReader reads records back in the order they were written.
type SpoolReader struct {
	r     *bufio.Reader
	c     io.Closer
	buf   []byte
	stats SpoolStats
	off   uint64
	inBad bool // inside a run of skipped bytes: count the run once
}

// OpenSpool opens a spool file for reading.
func OpenSpool(path string) (*SpoolReader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening spool: %w", err)
	}
	r, err := NewSpoolReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r.c = f
	return r, nil
}

// NewSpoolReader reads a spool from r, which is positioned at its start.
func NewSpoolReader(r io.Reader) (*SpoolReader, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	var h [spoolHeaderLen]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrNotSpool, err)
	}
	if string(h[:8]) != spoolMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrNotSpool, h[:8])
	}
	if v := binary.LittleEndian.Uint32(h[8:]); v != spoolVersion {
		return nil, fmt.Errorf("%w: spool format %d, this iocorr reads %d: ingest it with the iocorr that recorded it", ErrOtherLayout, v, spoolVersion)
	}
	if l := binary.LittleEndian.Uint32(h[12:]); l != wire.Layout {
		return nil, fmt.Errorf("%w: its records' layout is %#08x, this iocorr's %#08x: ingest it with the iocorr that recorded it", ErrOtherLayout, l, wire.Layout)
	}
	return &SpoolReader{r: br, buf: make([]byte, MaxRecord), off: spoolHeaderLen}, nil
}

// Next returns the next good record, or io.EOF at the end. The returned
// slice is valid until the next call. Damaged frames are skipped and
// counted in Stats, never returned.
func (s *SpoolReader) Next() ([]byte, error) {
	for {
		hdr, err := s.r.Peek(frameHeaderLen)
		if err != nil {
			if len(hdr) > 0 {
				s.stats.TornTail += uint64(len(hdr))
				s.r.Discard(len(hdr))
			}
			if errors.Is(err, io.EOF) || errors.Is(err, bufio.ErrBufferFull) {
				return nil, io.EOF
			}
			return nil, fmt.Errorf("reading spool at byte %d: %w", s.off, err)
		}
		n := int(binary.LittleEndian.Uint16(hdr[2:]))
		if binary.LittleEndian.Uint16(hdr[0:]) != frameSync || n == 0 || n > MaxRecord {
			s.resync()
			continue
		}
		sum := binary.LittleEndian.Uint32(hdr[4:])
		frame, err := s.r.Peek(frameHeaderLen + n)
		if err != nil {
			if errors.Is(err, io.EOF) {
				// A frame whose payload never made it to disk: the torn
				// tail of a run that stopped while writing.
				s.stats.TornTail += uint64(len(frame))
				s.r.Discard(len(frame))
				return nil, io.EOF
			}
			return nil, fmt.Errorf("reading spool at byte %d: %w", s.off, err)
		}
		if crc32.Checksum(frame[frameHeaderLen:], castagnoli) != sum {
			s.resync()
			continue
		}
		s.inBad = false
		copy(s.buf, frame[frameHeaderLen:])
		s.r.Discard(frameHeaderLen + n)
		s.off += uint64(frameHeaderLen + n)
		s.stats.Records++
		return s.buf[:n], nil
	}
}

// resync steps one byte past a bad frame start; the next iteration looks
// for a sync word whose checksum holds.
func (s *SpoolReader) resync() {
	if !s.inBad {
		s.stats.BadFrames++
	}
	s.inBad = true
	s.r.Discard(1)
	s.off++
	s.stats.SkippedBytes++
}

// Stats reports what was read and skipped so far.
func (s *SpoolReader) Stats() SpoolStats { return s.stats }

// Close closes the underlying file when the reader opened it.
func (s *SpoolReader) Close() error {
	if s.c != nil {
		return s.c.Close()
	}
	return nil
}
