package gguf

import (
	"errors"
	"fmt"
)

// Sentinel errors, for errors.Is. Every parse error is an *Error that
// wraps one of them, so callers can tell "not a model at all" from "a
// model this build cannot read" from "a damaged model".
var (
	// ErrNotGGUF: the file does not start with the GGUF magic.
	ErrNotGGUF = errors.New("not a GGUF file")
	// ErrVersion: a GGUF version (or byte order) this package does not read.
	ErrVersion = errors.New("unsupported GGUF version")
	// ErrTruncated: the file ends before the header or a tensor's data does.
	ErrTruncated = errors.New("truncated file")
	// ErrUnknownType: a tensor or metadata type id that is not known.
	ErrUnknownType = errors.New("unknown type")
	// ErrCorrupt: any other structural problem (absurd counts, overlapping
	// or misaligned tensors, duplicate names, bad alignment...).
	ErrCorrupt = errors.New("corrupt file")
	// ErrSplit: the shards of a split model do not fit together.
	ErrSplit = errors.New("inconsistent split model")
)

// Error describes what is wrong with a file and where.
type Error struct {
	// Offset is the byte offset in the file the problem was found at, or
	// -1 when it is not about one place.
	Offset int64
	// Msg says what and where, e.g. `tensor 12 "blk.1.ffn_up.weight":
	// data offset 123456 past end of file (size 100000)`.
	Msg string
	// Err is one of the sentinel errors, or an I/O error.
	Err error
}

func (e *Error) Error() string { return "gguf: " + e.Msg }
func (e *Error) Unwrap() error { return e.Err }

func newError(kind error, off int64, format string, a ...any) *Error {
	return &Error{Offset: off, Msg: fmt.Sprintf(format, a...), Err: kind}
}
