package bpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/iocorr/iocorr/ingest"
)

// The BPF programs wake the reader only for urgent events, for the token
// start a residency snapshot waits for, or when much is pending, so the
// reader also looks every pollInterval; it bounds how stale the spool can
// be and how long a stopped process waits for its SIGCONT when a wakeup
// is lost. Each look costs the traced command CPU: at 20 ms, the
// recorder took 35 ms of CPU a second beside a run in RAM, at 100 ms 13.
const (
	pollInterval  = 100 * time.Millisecond
	flushInterval = 100 * time.Millisecond
	// After the stop, events of other processes on the model files could
	// keep the ring busy forever; the final drain is bounded.
	finalDrain = 3 * time.Second
	// checkEvery bounds the records read between two looks at the
	// context and two ticks (the spool's flush) while the ring stays busy.
	checkEvery = 1024
)

// Drain copies ring-buffer records into the spool until ctx is done, then
// empties what is left and returns. act, when not nil, sees every record
// after it is spooled (user space must act on some at once: an mmap that
// stopped the process). counts is updated as records arrive, so a status
// line may read it; the caller must not write it.
//
// A spool write error (a full disk) ends the drain with that error; what
// was written before stays readable, and act still sees the record that
// could not be written, so a process it stopped is let go. The caller
// then keeps the ring moving with Discard. The reader belongs to the
// tracer, which closes it: Discard may need it after Drain.
func Drain(ctx context.Context, rd *Ring, sp *ingest.SpoolWriter, counts *ingest.Counts, act func(typ uint16, rec []byte)) error {
	lastFlush := time.Now()
	var written uint64
	err := pump(ctx, rd, act, func(typ uint16, rec []byte) error {
		if err := sp.Write(rec); err != nil {
			return fmt.Errorf("spool write failed after %d records arrived; the rest of the run is not recorded: %w", written, err)
		}
		written++
		if int(typ) < len(counts) {
			atomic.AddUint64(&counts[typ], 1)
		}
		return nil
	}, func() error {
		if time.Since(lastFlush) < flushInterval {
			return nil
		}
		lastFlush = time.Now()
		if err := sp.Flush(); err != nil {
			return fmt.Errorf("spool flush failed after %d records arrived; the rest of the run is not recorded: %w", written, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := sp.Flush(); err != nil {
		return fmt.Errorf("spool flush failed after %d records arrived: %w", written, err)
	}
	return nil
}

// Discard reads and drops ring-buffer records until ctx is done, handing
// each to act. After the spool failed, the BPF programs still stop a
// process that maps a new executable file and wait for user space to
// continue it: someone must keep reading. It returns how many records
// were dropped.
func Discard(ctx context.Context, rd *Ring, act func(typ uint16, rec []byte)) (uint64, error) {
	var n uint64
	err := pump(ctx, rd, act, func(uint16, []byte) error { n++; return nil }, func() error { return nil })
	return n, err
}

// pump is the reading loop of Drain and Discard: one reused record, so
// no allocation per event; keep is called before act for every record,
// tick after every checkEvery records and every wait. It reads what the
// ring holds without blocking (a deadline long past, set once), and waits
// for more in Go's poller (Ring.Wait), never in a blocking system
// call.
func pump(ctx context.Context, rd *Ring, act func(uint16, []byte), keep func(uint16, []byte) error, tick func() error) error {
	var rec ringbuf.Record
	stopping := false
	var stopAt time.Time
	defer context.AfterFunc(ctx, rd.Interrupt)()
	rd.SetDeadline(time.Unix(1, 0))
	for n := 0; ; n++ {
		// The clock and the context are read between batches of records,
		// not per record: three clock reads a record were a tenth of a
		// cold run's recorder CPU (43 000 records).
		if n%checkEvery == 0 {
			if !stopping && ctx.Err() != nil {
				stopping, stopAt = true, time.Now()
			}
			if stopping && time.Since(stopAt) > finalDrain {
				return nil
			}
			if n > 0 {
				if err := tick(); err != nil {
					return err
				}
			}
		}
		err := rd.ReadInto(&rec)
		switch {
		case err == nil:
			typ := ingest.RecordType(rec.RawSample)
			kerr := keep(typ, rec.RawSample)
			if act != nil {
				act(typ, rec.RawSample)
			}
			if kerr != nil {
				return kerr
			}
			continue
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Nothing pending: after a stop, the ring is empty and
			// everything is in the spool.
			if !stopping && ctx.Err() != nil {
				stopping, stopAt = true, time.Now()
			}
			if stopping {
				return nil
			}
			// Until data, a wakeup or the next look: a stop is seen
			// within pollInterval, as before.
			err = rd.Wait(time.Now().Add(pollInterval))
			if errors.Is(err, ringbuf.ErrClosed) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("waiting on the ring buffer: %w", err)
			}
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		default:
			return fmt.Errorf("reading the ring buffer: %w", err)
		}
		if err := tick(); err != nil {
			return err
		}
		n = -1 // a batch begins
	}
}
