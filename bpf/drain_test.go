package bpf

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// faultAway makes page faults in this process: anonymous memory touched
// page by page, each a minor fault the tracer records.
func faultAway(pages int) {
	mem, err := unix.Mmap(-1, 0, pages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(err)
	}
	for p := 0; p < pages; p++ {
		mem[p*4096] = 1
		sink += mem[p*4096]
	}
	unix.Munmap(mem)
}

func TestDrainSpoolsEveryRecordAndCountsByType(t *testing.T) {
	testenv.RequireBPF(t)
	// Anonymous faults are this test's records: one by one.
	tr, err := Open(Options{Probes: rundir.ProbeSet{Faults: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	p := filepath.Join(t.TempDir(), "spool")
	sp, err := ingest.CreateSpool(p)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var counts ingest.Counts
	seen := 0
	done := make(chan error, 1)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	go func() { done <- Drain(ctx, tr.RingBuf(), sp, &counts, func(uint16, []byte) { seen++ }) }()
	if err := tr.TracePID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	faultAway(20000)
	time.Sleep(100 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	// One reused record: the heap does not grow with the events (the
	// whole process is measured, so a few allocations are allowed).
	if allocs := after.Mallocs - before.Mallocs; float64(allocs) > 0.01*float64(counts.Total()) {
		t.Errorf("%d allocations while draining %d records", allocs, counts.Total())
	} else {
		t.Logf("%d allocations while draining %d records", allocs, counts.Total())
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	faults := counts.Get(uint32(wire.EventTypeEV_FAULT))
	if faults < 20000 {
		t.Fatalf("%d faults counted, want at least the 20000 made", faults)
	}
	r, err := ingest.OpenSpool(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var n uint64
	for {
		if _, err := r.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		n++
	}
	if n != counts.Total() || uint64(seen) != n {
		t.Fatalf("spool has %d records, counted %d, acted on %d", n, counts.Total(), seen)
	}
}

func TestDrainStopsWithAClearErrorWhenTheDiskIsFullAndDiscardKeepsTheRingMoving(t *testing.T) {
	testenv.RequireBPF(t)
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mounting a small tmpfs: %v", err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	// Anonymous faults are this test's records: one by one.
	tr, err := Open(Options{Probes: rundir.ProbeSet{Faults: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	p := filepath.Join(mnt, "spool")
	sp, err := ingest.CreateSpool(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.TracePID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var counts ingest.Counts
	var seen atomic.Uint64
	act := func(uint16, []byte) { seen.Add(1) }
	done := make(chan error, 1)
	go func() { done <- Drain(ctx, tr.RingBuf(), sp, &counts, act) }()
	var derr error
	for i := 0; i < 100 && derr == nil; i++ {
		faultAway(2000) // ~170 KiB of fault records per round
		select {
		case derr = <-done:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if derr == nil || !errors.Is(derr, syscall.ENOSPC) || !strings.Contains(derr.Error(), "not recorded") {
		t.Fatalf("drain error = %v, want no space left on device, saying the rest is not recorded", derr)
	}
	// The record that hit the full disk was acted on all the same: it
	// may be the mmap that stopped a process.
	if s, c := seen.Load(), counts.Total(); s != c && s != c+1 {
		t.Fatalf("acted on %d records, %d were spooled", s, c)
	}

	// The spool is gone; the ring must still be read.
	dctx, dcancel := context.WithCancel(context.Background())
	dropped := make(chan uint64, 1)
	before := seen.Load()
	go func() {
		n, err := Discard(dctx, tr.RingBuf(), act)
		if err != nil {
			t.Error(err)
		}
		dropped <- n
	}()
	faultAway(500)
	time.Sleep(100 * time.Millisecond)
	dcancel()
	if n := <-dropped; n < 500 || seen.Load()-before != n {
		t.Fatalf("Discard dropped %d records and acted on %d, want at least the 500 faults made", n, seen.Load()-before)
	}

	sp.Close()
	// What made it to the disk is readable.
	r, err := ingest.OpenSpool(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n := 0
	for {
		if _, err := r.Next(); err != nil {
			break
		}
		n++
	}
	if n == 0 {
		t.Fatal("nothing readable in the spool of a full disk")
	}
	t.Logf("%d records readable before the disk filled (%+v); %v", n, r.Stats(), derr)
}
