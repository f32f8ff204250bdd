package bpf

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// Ring is the events ring buffer as user space reads it: cilium's reader
// for the records, and a wait for data that parks the reading goroutine
// in Go's own poller rather than in a blocking epoll_wait. A goroutine in
// a blocking system call holds its P until the runtime's monitor takes it
// back, 10 ms on, and every such retake sets the monitor polling every
// 20 µs again: reading with a 20 ms deadline, the recorder woke 1,450
// times a second, 37 ms of CPU a second, on the CPUs the traced command's
// threads wanted (ingest polls every 100 ms now, and the kernel wakes it
// for what cannot wait).
type Ring struct {
	*ringbuf.Reader
	// f is a duplicate of the map's descriptor, non-blocking, in Go's
	// poller; nil where the poller would not take it (then Wait sleeps).
	f           *os.File
	raw         syscall.RawConn
	closed      atomic.Bool
	interrupted atomic.Bool
}

func newRing(m *ebpf.Map) (*Ring, error) {
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		return nil, err
	}
	r := &Ring{Reader: rd}
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		rd.Close()
		return nil, fmt.Errorf("duplicating the ring buffer's descriptor: %w", err)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		rd.Close()
		return nil, fmt.Errorf("making the ring buffer's descriptor non-blocking: %w", err)
	}
	f := os.NewFile(uintptr(fd), "ringbuf")
	raw, err := f.SyscallConn()
	// A descriptor the poller refused takes no deadline.
	if err == nil && f.SetReadDeadline(time.Time{}) == nil {
		r.f, r.raw = f, raw
	} else {
		f.Close()
	}
	return r, nil
}

// Wait returns once the ring holds data, the kernel woke its readers, or
// the deadline passed, whichever is first; after Close it returns
// ringbuf.ErrClosed.
func (r *Ring) Wait(deadline time.Time) error {
	if r.f == nil {
		if !r.interrupted.Swap(false) {
			time.Sleep(time.Until(deadline))
		}
		return r.waitErr(nil)
	}
	if err := r.f.SetReadDeadline(deadline); err != nil {
		return r.waitErr(err)
	}
	// After the deadline is set: an Interrupt before it is seen here, one
	// after it moves the deadline.
	if r.interrupted.Swap(false) {
		return r.waitErr(nil)
	}
	err := r.raw.Read(func(uintptr) bool { return r.AvailableBytes() > 0 })
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return r.waitErr(err)
}

// Interrupt ends a Wait under way at once, or else the next one (a stop
// need not wait out the poll).
func (r *Ring) Interrupt() {
	r.interrupted.Store(true)
	if r.f != nil {
		r.f.SetReadDeadline(time.Unix(1, 0))
	}
}

func (r *Ring) waitErr(err error) error {
	if err == nil && !r.closed.Load() {
		return nil
	}
	// The poller's error for a closed descriptor is its own ("use of
	// closed file"), not os.ErrClosed.
	if r.closed.Load() || errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("ringbuffer: %w", ringbuf.ErrClosed)
	}
	return err
}

// Close closes the reader and the descriptor Wait polls.
func (r *Ring) Close() error {
	r.closed.Store(true)
	err := r.Reader.Close()
	if r.f != nil {
		err = errors.Join(err, r.f.Close())
	}
	return err
}
