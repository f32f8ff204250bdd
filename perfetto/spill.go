package perfetto

import (
	"cmp"
	"encoding/binary"
	"errors"

	"github.com/iocorr/iocorr/internal/extsort"
	"github.com/iocorr/iocorr/internal/varint"
)

// The trace's events are made in passes over the store (calls, faults,
// block requests, reads, counters, thread states) and written in time
// order. They go through an external sort as they are made, so the
// export holds a bounded batch of them, never the run's: a trace of
// millions of events is written at the memory of a small one.

// eventBatch is how many events the sort holds before it spills a run.
// An event with its annotations is a few hundred bytes in memory, and
// the collector lets garbage grow to the live heap's size again: 1<<16
// of them were ~60 MiB of an export's 125–140 MiB peak on a 4.5 GiB MoE
// run, 1<<14 halved the peak (63 MiB) at the same speed. The merge reads
// one run per 16 Ki events through a 64 KiB buffer: 4 bytes per event.
const eventBatch = 1 << 14

// byTimeThenRank orders events as the trace is written: by time, and at
// one time ends first (see rank); made order breaks ties (the sort is
// stable).
func byTimeThenRank(x, y *trackEvent) int {
	return cmp.Or(cmp.Compare(x.ts, y.ts), cmp.Compare(rank(x.typ), rank(y.typ)))
}

func newEventSort() *extsort.Sorter[trackEvent] {
	return extsort.New(eventBatch, byTimeThenRank, extsort.Codec[trackEvent]{Append: appendEvent, Decode: decodeEvent})
}

// emit adds one event to the trace; the first error of the sort is kept
// and returned by write.
func (b *builder) emit(e trackEvent) {
	if b.err == nil {
		b.err = b.events.Add(e)
	}
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendIDs(b []byte, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

func appendEvent(b []byte, e *trackEvent) []byte {
	b = binary.AppendUvarint(b, e.ts)
	b = binary.AppendUvarint(b, e.track)
	b = binary.AppendUvarint(b, e.typ)
	b = appendString(b, e.name)
	b = appendString(b, e.category)
	b = binary.AppendVarint(b, e.counter)
	b = binary.AppendUvarint(b, uint64(len(e.anns)))
	for _, a := range e.anns {
		b = appendString(b, a.name)
		b = append(b, a.kind)
		switch a.kind {
		case 'u':
			b = binary.AppendUvarint(b, a.u)
		case 'i':
			b = binary.AppendVarint(b, a.i)
		default:
			b = appendString(b, a.s)
		}
	}
	b = appendIDs(b, e.flows)
	return appendIDs(b, e.endFlows)
}

var errBadEvent = errors.New("a spilled trace event is malformed")

// ids reads a count and that many uvarints; a count past what is left
// reads none.
func ids(r *varint.Reader) []uint64 {
	n := r.Uvarint()
	if n == 0 || n > uint64(len(r.B)) {
		return nil
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = r.Uvarint()
	}
	return ids
}

func decodeEvent(b []byte, e *trackEvent) error {
	r := varint.Reader{B: b}
	e.ts, e.track, e.typ = r.Uvarint(), r.Uvarint(), r.Uvarint()
	e.name, e.category = r.String(), r.String()
	e.counter = r.Varint()
	if n := r.Uvarint(); n > 0 && n <= uint64(len(r.B)) {
		e.anns = make([]annotation, n)
		for i := range e.anns {
			a := &e.anns[i]
			a.name = r.String()
			a.kind = r.Byte()
			switch a.kind {
			case 'u':
				a.u = r.Uvarint()
			case 'i':
				a.i = r.Varint()
			default:
				a.s = r.String()
			}
		}
	}
	e.flows, e.endFlows = ids(&r), ids(&r)
	return whole(&r)
}

// whole says whether r read its record whole: no error, nothing left.
func whole(r *varint.Reader) error {
	if r.Err != nil || len(r.B) != 0 {
		return errBadEvent
	}
	return nil
}
