package ingest

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/iocorr/iocorr/bpf"
)

// The BPF programs wake the reader only for urgent events or when much is
// pending, so the reader polls on this deadline; it bounds how stale the
// spool can be and how long a stopped process waits for its SIGCONT when
// a wakeup is lost.
const (
	pollInterval  = 20 * time.Millisecond
	flushInterval = 200 * time.Millisecond
	// After the stop, events of other processes on the model files could
	// keep the ring busy forever; the final drain is bounded.
	finalDrain    = 3 * time.Second
	hdrTypeOffset = 24 // struct event_hdr: u16 type after ts, tgid, tid, token, op
)

// Counts holds records written to the spool per event type.
type Counts [bpf.EventTypeCount]uint64

// Map names the counts for the run metadata; every type is present.
func (c *Counts) Map() map[string]uint64 {
	m := make(map[string]uint64, len(c))
	for t := uint32(1); t < bpf.EventTypeCount; t++ {
		m[bpf.EventTypeName(t)] = c.Get(t)
	}
	return m
}

// Get reads one count; safe while Drain runs.
func (c *Counts) Get(typ uint32) uint64 { return atomic.LoadUint64(&c[typ]) }

// Total is the number of records of every type.
func (c *Counts) Total() uint64 {
	var n uint64
	for t := range c {
		n += c.Get(uint32(t))
	}
	return n
}

// RecordType returns the event type of a raw record, 0 if it is too short.
func RecordType(rec []byte) uint16 {
	if len(rec) < hdrTypeOffset+2 {
		return 0
	}
	return binary.LittleEndian.Uint16(rec[hdrTypeOffset:])
}

// Drain copies ring-buffer records into the spool until ctx is done, then
// empties what is left and returns. act, when not nil, sees every record
// after it is spooled (user space must act on some at once: an mmap that
// stopped the process). counts is updated as records arrive, so a status
// line may read it; the caller must not write it.
//
// A spool write error (a full disk) ends the drain with that error; what
// was written before stays readable.
func Drain(ctx context.Context, rd *ringbuf.Reader, sp *SpoolWriter, counts *Counts, act func(typ uint16, rec []byte)) error {
	var rec ringbuf.Record
	lastFlush := time.Now()
	stopping := false
	var stopAt time.Time
	for {
		if !stopping && ctx.Err() != nil {
			stopping, stopAt = true, time.Now()
		}
		if stopping && time.Since(stopAt) > finalDrain {
			return sp.Flush()
		}
		rd.SetDeadline(time.Now().Add(pollInterval))
		err := rd.ReadInto(&rec)
		switch {
		case err == nil:
			typ := RecordType(rec.RawSample)
			if err := sp.Write(rec.RawSample); err != nil {
				return err
			}
			if int(typ) < len(counts) {
				atomic.AddUint64(&counts[typ], 1)
			}
			if act != nil {
				act(typ, rec.RawSample)
			}
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Nothing pending at the deadline: after a stop, the ring
			// is empty and everything is in the spool.
			if stopping {
				return sp.Flush()
			}
		case errors.Is(err, ringbuf.ErrClosed):
			return sp.Flush()
		default:
			return err
		}
		if time.Since(lastFlush) >= flushInterval {
			if err := sp.Flush(); err != nil {
				return err
			}
			lastFlush = time.Now()
		}
	}
}
