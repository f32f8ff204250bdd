// Package varint reads encoding/binary's varints one after another from a
// byte slice, keeping the first error, for the decoders of iocorr's own
// encodings (the store's event chunks, the spilled trace events, the
// external sort's records). encoding/binary's own reader, ReadUvarint,
// takes an io.ByteReader: an interface call per byte, measured 2.5× the
// time of Uvarint on a slice, and the store's chunks are read per query.
package varint

import (
	"encoding/binary"
	"errors"
)

// ErrShort is a value cut short (or a varint that overflows 64 bits).
var ErrShort = errors.New("cut short")

// Reader consumes B; after the first error every read returns 0 and Err
// says it.
type Reader struct {
	B   []byte
	Err error
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.B)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Varint reads a zigzag varint.
func (r *Reader) Varint() int64 {
	v, n := binary.Varint(r.B)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.B = r.B[n:]
	return v
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.B) == 0 {
		r.fail()
		return 0
	}
	b := r.B[0]
	r.B = r.B[1:]
	return b
}

// String reads a uvarint length and that many bytes.
func (r *Reader) String() string {
	n := r.Uvarint()
	if uint64(len(r.B)) < n {
		r.fail()
		return ""
	}
	s := string(r.B[:n])
	r.B = r.B[n:]
	return s
}

func (r *Reader) fail() {
	if r.Err == nil {
		r.Err = ErrShort
	}
	r.B = nil
}
