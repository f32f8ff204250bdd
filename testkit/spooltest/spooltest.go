// Package spooltest reads a recorded run's event spool in tests, the way
// every reader of records does (ingest.OpenSpool, ingest.Decode), and
// checks what the kernel resolved against the model file.
package spooltest

import (
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// Events calls fn for every record of the spool of the run in dir, and
// fails t if the spool is damaged (a bad frame, a torn tail).
func Events(t testing.TB, dir string, fn func(typ uint16, rec []byte)) {
	t.Helper()
	st, err := read(t, dir, fn)
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	if st.BadFrames != 0 || st.TornTail != 0 {
		t.Fatalf("spool damaged: %+v", st)
	}
}

// EventsLoose is Events for a spool that may end in a torn frame (a run
// cut short): it stops at the first record it cannot read.
func EventsLoose(t testing.TB, dir string, fn func(typ uint16, rec []byte)) {
	t.Helper()
	read(t, dir, fn)
}

// read calls fn for each record up to the end of the spool (io.EOF) or
// the first one it cannot read (that error), and returns the spool's
// counts of what it passed over.
func read(t testing.TB, dir string, fn func(typ uint16, rec []byte)) (ingest.SpoolStats, error) {
	t.Helper()
	r, err := ingest.OpenSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if err != nil {
			return r.Stats(), err
		}
		fn(ingest.RecordType(rec), rec)
	}
}

// Decoded decodes a whole spool record, failing t if it does not decode.
func Decoded(t testing.TB, rec []byte) ingest.Record {
	t.Helper()
	var st ingest.DecodeStats
	d, ok := ingest.Decode(rec, &st)
	if !ok {
		t.Fatalf("a spool record that does not decode: %+v", st)
	}
	return d
}

// CheckWeightOffset checks that a graph node's weight, resolved in the
// kernel from its data pointer, is at the file offset the GGUF gives, and
// marks it seen. Leaves that are no tensor of f (inputs, the KV cache)
// are passed over.
func CheckWeightOffset(t testing.TB, f *gguf.File, e *wire.NodeEvent, seen map[string]bool) {
	t.Helper()
	name := wire.CString(e.WeightName[:])
	tensor := f.Tensor(name)
	if tensor == nil {
		return
	}
	seen[name] = true
	if e.Ino == 0 || int64(e.FileOff) != tensor.FileOffset {
		t.Errorf("weight %s at file offset %d (ino %d), GGUF says %d", name, e.FileOff, e.Ino, tensor.FileOffset)
	}
}

// CheckNothingLost reports every event type a run lost records of (a
// run's meta.json Lost): the tests' counts hold only for a whole record.
func CheckNothingLost(t testing.TB, lost map[string]uint64) {
	t.Helper()
	for typ, n := range lost {
		if n != 0 {
			t.Errorf("lost %d %s events", n, typ)
		}
	}
}

// Faults calls fn for every fault of the spool of the run in dir: each
// fault record (n 1, f the record) and each of the kernel's counts of
// faults outside the model files (n its count, f nil), with its thread's
// header and its class. A tally of faults by class or process is the same
// whichever way the run recorded them (--probe faults or not).
func Faults(t testing.TB, dir string, fn func(h *wire.EventHdr, class uint8, n uint64, f *wire.FaultEvent)) {
	t.Helper()
	Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_FAULT):
			f := Decoded(t, rec).Fault()
			fn(&f.Hdr, f.Class, 1, f)
		case uint32(wire.EventTypeEV_FAULT_COUNT):
			c := Decoded(t, rec).FaultCount()
			fn(&c.Hdr, c.Class, c.Count, nil)
		}
	})
}

// BufNames calls fn for every buffer name of the spool of the run in dir
// (ggml_backend_buffer_name's returns), in the spool's order.
func BufNames(t testing.TB, dir string, fn func(b *wire.BufnameEvent)) {
	t.Helper()
	Events(t, dir, func(typ uint16, rec []byte) {
		if uint32(typ) == uint32(wire.EventTypeEV_BUFNAME) {
			fn(Decoded(t, rec).BufName())
		}
	})
}
