package extsort

import (
	"encoding/binary"
	"errors"
)

// MaxInts is how many integers a record of Ints may have.
const MaxInts = 8

// ErrBadRecord is a sorted record whose bytes are not those Ints wrote.
var ErrBadRecord = errors.New("a sorted record of the wrong length")

// Ints is the Codec of a record that is n integers (at most MaxInts; a
// bool is 0 or 1): fields lists them, set puts them back. Each is written
// as a zigzag varint, small whatever its sign, and the record goes by
// value in an array so that neither way allocates: the figures that sort
// records sort millions of them.
func Ints[T any](n int, fields func(v *T) [MaxInts]int64, set func(v *T, a [MaxInts]int64)) Codec[T] {
	if n < 1 || n > MaxInts {
		panic("extsort.Ints: a record of 1 to MaxInts integers")
	}
	return Codec[T]{
		Append: func(b []byte, v *T) []byte {
			a := fields(v)
			for _, x := range a[:n] {
				b = binary.AppendVarint(b, x)
			}
			return b
		},
		Decode: func(b []byte, v *T) error {
			var a [MaxInts]int64
			for i := range n {
				x, k := binary.Varint(b)
				if k <= 0 {
					return ErrBadRecord
				}
				a[i], b = x, b[k:]
			}
			if len(b) != 0 {
				return ErrBadRecord
			}
			set(v, a)
			return nil
		},
	}
}

// Bool is b as an integer of Ints' records.
func Bool(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
