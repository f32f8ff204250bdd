package bpf

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/rundir"
)

// Ring.Wait parks the reader in Go's poller: it returns at its deadline
// while the ring stays empty, at once when records are there, on the
// kernel's wakeup when enough piles up (RB_WAKEUP_BYTES: the records of
// faults are not woken for one by one), and with ErrClosed after Close.
func TestRingWaitReturnsOnDataOrWakeupOrDeadline(t *testing.T) {
	tr := quietTracer(t)
	rd := tr.RingBuf()
	if rd.f == nil {
		t.Fatal("the ring buffer's descriptor is not in Go's poller: Wait would sleep")
	}

	empty(t, rd)
	start := time.Now()
	if err := rd.Wait(start.Add(100 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 90*time.Millisecond {
		t.Errorf("a wait on an empty ring returned after %v with no wakeup, want its deadline", took)
	}

	if err := tr.TracePID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	// More than RB_WAKEUP_BYTES of fault records: the kernel wakes the
	// reader once they pile up, long before the wait's deadline.
	empty(t, rd)
	woke := waitAside(t, rd, 30*time.Second)
	time.Sleep(50 * time.Millisecond)
	mem, err := unix.Mmap(-1, 0, 40000*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < 40000; p++ {
		mem[p*4096] = 1
	}
	unix.Munmap(mem)
	select {
	case took := <-woke:
		t.Logf("woken %v into a 30 s wait, %d KiB in the ring", took, rd.AvailableBytes()/1024)
		if rd.AvailableBytes() < 512<<10 {
			t.Errorf("the wait returned after %v with nothing in the ring", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no wakeup 10 s after %d KiB of records", rd.AvailableBytes()/1024)
	}

	start = time.Now()
	if err := rd.Wait(start.Add(10 * time.Second)); err != nil || time.Since(start) > time.Second {
		t.Errorf("a wait on a ring with records returned %v after %v, want nil at once", err, time.Since(start))
	}

	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rd.Wait(time.Now().Add(time.Second)); !errors.Is(err, ringbuf.ErrClosed) {
		t.Errorf("a wait after Close returned %v, want ErrClosed", err)
	}
}

// quietTracer is a tracer whose ring holds only what the test makes: its
// block programs keep to a device no disk has. They record every other
// disk's requests by default, and under CI's parallel test packages one
// landed between emptying the ring and a wait, which then returned at
// once (the wait ended 4 µs in, before the interrupt it was waiting for).
func quietTracer(t *testing.T) *Tracer {
	// Anonymous faults are its tests' records: one by one.
	return openTracer(t, Options{Devices: []uint32{^uint32(0)}, Probes: rundir.ProbeSet{Faults: true}})
}

// empty reads every record the ring holds now.
func empty(t *testing.T, rd *Ring) {
	t.Helper()
	var rec ringbuf.Record
	for {
		rd.SetDeadline(time.Now())
		err := rd.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// A stop need not wait out the poll: Interrupt ends a Wait under way, or
// the next one when none is.
func TestRingInterruptEndsAWaitUnderWay(t *testing.T) {
	tr := quietTracer(t)
	rd := tr.RingBuf()
	empty(t, rd)
	done := waitAside(t, rd, 30*time.Second)
	time.Sleep(50 * time.Millisecond)
	rd.Interrupt()
	select {
	case took := <-done:
		if took < 40*time.Millisecond {
			t.Errorf("the wait ended after %v, before the interrupt", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait went on 10 s after the interrupt")
	}
	rd.Interrupt()
	start := time.Now()
	if err := rd.Wait(start.Add(30 * time.Second)); err != nil || time.Since(start) > time.Second {
		t.Errorf("a wait after an interrupt returned %v after %v, want nil at once", err, time.Since(start))
	}
}

// waitAside runs a Wait of d on its own goroutine and gives how long it
// took.
func waitAside(t *testing.T, rd *Ring, d time.Duration) <-chan time.Duration {
	took := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		if err := rd.Wait(start.Add(d)); err != nil {
			t.Error(err)
		}
		took <- time.Since(start)
	}()
	return took
}
