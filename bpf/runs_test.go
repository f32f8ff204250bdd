package bpf

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
	"golang.org/x/sys/unix"
)

// onCPU runs f on a thread bound to cpu.
func onCPU(t *testing.T, cpu int, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is left bound and dies with the goroutine.
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- err
			return
		}
		f()
		done <- nil
	}()
	if err := <-done; err != nil {
		t.Fatalf("binding a thread to CPU %d: %v", cpu, err)
	}
}

// TestAPageAddedOnOneCPUAndDeletedOnAnotherKeepsItsOrder reads a file on
// CPU 0 (its add run stays pending there: no fault ends it), evicts it
// from CPU 1, and reads it again on CPU 0: each event on a page held by a
// run pending on the other CPU must put that run in the ring first, so
// that replaying the ring in order never adds a resident page or deletes
// one that is not, and ends with the file resident.
func TestAPageAddedOnOneCPUAndDeletedOnAnotherKeepsItsOrder(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	const pages = 64
	f, dev, ino := coldFile(t, pages)
	tr := openTracer(t, Options{Probes: rundir.ProbeSet{PageCache: true}})
	if err := tr.AddFile(dev, ino); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, pages*4096)
	read := func() {
		if n, err := f.ReadAt(buf, 0); n != len(buf) || err != nil {
			t.Errorf("read %d bytes: %v", n, err)
		}
	}
	onCPU(t, 0, read)
	onCPU(t, 1, func() {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Error(err)
		}
	})
	onCPU(t, 0, read)
	if n := residentPages(t, f, pages); n != pages {
		t.Fatalf("%d of %d pages resident after the second read", n, pages)
	}

	resident := map[uint64]bool{}
	var seq []string
	drain(t, tr, func(typ uint16, rec []byte) {
		if uint32(typ) != uint32(wire.EventTypeEV_PAGE_RUN) {
			return
		}
		var e wire.PageRunEvent
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e)), rec)
		if e.Ino != ino || e.Dev != dev {
			return
		}
		add := e.Kind == uint16(wire.EventTypeEV_PAGE_ADD)
		seq = append(seq, fmt.Sprintf("%s@cpu%d[%d+%d]", map[bool]string{true: "add", false: "del"}[add], e.Hdr.Cpu, e.Index, e.NrPages))
		e.Ranges(func(first, n uint64) {
			for p := first; p < first+n; p++ {
				if resident[p] == add {
					t.Errorf("page %d %s while %s", p, map[bool]string{true: "added", false: "deleted"}[add],
						map[bool]string{true: "resident", false: "not resident"}[resident[p]])
				}
				resident[p] = add
			}
		})
	})
	t.Logf("runs in ring order: %v", seq)
	for p := uint64(0); p < pages; p++ {
		if !resident[p] {
			t.Errorf("page %d not resident at the end of the replay", p)
		}
	}
	lost := lostEvents(t, tr)
	if lost["page_run"] != 0 {
		t.Errorf("%d page runs lost", lost["page_run"])
	}
}
