package bpf

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// faultTally is a thread's faults by where they were, as records and as
// the kernel's counts.
type faultTally struct {
	minor, major      uint64 // completed, records and counts together
	modelRecords      uint64 // records in the model file
	otherRecords      uint64 // records in the file that is no model
	anonCount         uint64 // counted, anonymous
	otherCount        uint64 // counted, the file that is no model
	counts            int    // count records of any thread
	otherStallCounted uint64
	noStartRecords    uint64 // records of faults taken in kernel mode
}

func TestFaultsOutsideTheModelsAreCountedInTheKernelAsTheThreadsOwnCountersCountThem(t *testing.T) {
	const pages, anonPages = 16, 64
	touched := []int{0, 3, 7, 8, 12, 15}
	tests := []struct {
		name    string
		opts    Options
		counted bool // faults outside the models come as counts
	}{
		{"counted in the kernel (the default)", Options{}, true},
		{"one by one (--probe faults)", Options{Probes: rundir.ProbeSet{Faults: true}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model, mdev, mino := coldFile(t, pages)
			other, odev, oino := coldFile(t, pages)
			tr := openTracer(t, tc.opts)
			if tc.counted && tr.FaultsCounted() == "" {
				t.Fatal("this kernel resolves faults (bpf_find_vma), yet the tracer counts none")
			}
			// The thread's own counters are the oracle: the kernel raises
			// min_flt or maj_flt where it counts the perf fault events
			// (mm_account_fault), for every fault of the thread. They are
			// read from outside it (/proc) while it waits, locked, before
			// the tracing starts and after its records and counts are
			// read, so that every fault between is in both.
			var mmem, omem, anon, kmode []byte
			zero, err := unix.Open("/dev/zero", unix.O_RDONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(zero)
			ready, start, touched1, finish := make(chan uint32), make(chan struct{}), make(chan struct{}), make(chan struct{})
			go func() {
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				ready <- uint32(unix.Gettid())
				<-start
				for _, p := range touched {
					sink += mmem[p*4096]
					sink += omem[p*4096]
				}
				for p := range anonPages {
					anon[p*4096] = 1
				}
				// The kernel writes the pages after the first, which
				// the thread never touched: faults taken in kernel mode,
				// in a mapping the thread's first fault resolved.
				for p := 1; p < 4; p++ {
					if _, err := unix.Read(zero, kmode[p*4096:(p+1)*4096]); err != nil {
						panic(err)
					}
				}
				touched1 <- struct{}{}
				<-finish
			}()
			defer close(finish)
			tid := <-ready
			beforeMin, beforeMaj := threadFaults(t, tid)
			mmem = traceRandomMapping(t, tr, model, mdev, mino, pages)
			if err := tr.MarkNotModel(odev, oino); err != nil {
				t.Fatal(err)
			}
			omem, err = unix.Mmap(int(other.Fd()), 0, pages*4096, unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(omem)
			if err := unix.Madvise(omem, unix.MADV_RANDOM); err != nil {
				t.Fatal(err)
			}
			anon, err = unix.Mmap(-1, 0, anonPages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(anon)
			kmode, err = unix.Mmap(-1, 0, 4*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(kmode)
			kmode[0] = 1 // from user mode, here: the VMA cache learns the mapping in this thread's process
			close(start)
			<-touched1

			var got faultTally
			drain(t, tr, func(typ uint16, rec []byte) {
				if uint32(typ) != uint32(wire.EventTypeEV_FAULT) {
					return
				}
				e := (*wire.FaultEvent)(unsafe.Pointer(&rec[0]))
				if e.Hdr.Tid != tid {
					return
				}
				// A fault retried (VM_FAULT_RETRY) shows its first try as
				// unaccounted: the retry is the one the kernel counts.
				if !got.add(e.Class, 1) {
					return
				}
				if e.StartTs == 0 {
					got.noStartRecords++
				}
				switch {
				case e.Ino == mino && e.Dev == mdev:
					got.modelRecords++
				case e.Ino == oino && e.Dev == odev:
					got.otherRecords++
				}
			})
			counts, err := tr.FaultCounts()
			if err != nil {
				t.Fatal(err)
			}
			got.counts = len(counts)
			for _, c := range counts {
				if c.Hdr.Tid != tid {
					continue
				}
				if !got.add(c.Class, c.Count) {
					continue
				}
				switch c.Where {
				case uint8(wire.FaultWhereFAULT_WHERE_ANON):
					got.anonCount += c.Count
				case uint8(wire.FaultWhereFAULT_WHERE_OTHER):
					got.otherCount += c.Count
					got.otherStallCounted += c.StallNs
				}
				if c.Count == 0 || c.FirstTs > c.Hdr.Ts || c.Hdr.Type != uint16(wire.EventTypeEV_FAULT_COUNT) {
					t.Errorf("a count that is no count: %+v", c)
				}
			}
			afterMin, afterMaj := threadFaults(t, tid)
			t.Logf("%+v; the thread's minflt %d majflt %d", got, afterMin-beforeMin, afterMaj-beforeMaj)
			if got.minor != afterMin-beforeMin || got.major != afterMaj-beforeMaj {
				t.Errorf("%d minor and %d major faults recorded and counted; the thread's counters say %d and %d",
					got.minor, got.major, afterMin-beforeMin, afterMaj-beforeMaj)
			}
			if got.modelRecords != uint64(len(touched)) {
				t.Errorf("%d faults in the model recorded, want one per touched page, %d", got.modelRecords, len(touched))
			}
			if tc.counted {
				if got.otherCount != uint64(len(touched)) || got.otherRecords != 0 || got.anonCount < anonPages {
					t.Errorf("counted %d faults in the file that is no model (%d records) and %d anonymous; want %d, 0 and at least %d",
						got.otherCount, got.otherRecords, got.anonCount, len(touched), anonPages)
				}
				// Each of them waited for the disk (cold, MADV_RANDOM).
				if got.otherStallCounted == 0 {
					t.Error("the faults counted in a cold file stalled 0 ns")
				}
				// Taken in kernel mode in an anonymous mapping the VMA
				// cache knows: counted too.
				if got.noStartRecords != 0 || got.anonCount < anonPages+3 {
					t.Errorf("%d records of faults taken in kernel mode, %d anonymous faults counted; want 0 and at least %d", got.noStartRecords, got.anonCount, anonPages+3)
				}
			} else if got.counts != 0 || got.otherRecords != uint64(len(touched)) || got.noStartRecords < 3 {
				t.Errorf("%d counts, %d records in the file that is no model and %d of faults taken in kernel mode; want 0, %d and at least 3",
					got.counts, got.otherRecords, got.noStartRecords, len(touched))
			}
		})
	}
}

// add tallies n completed faults of class; false for another class.
func (f *faultTally) add(class uint8, n uint64) bool {
	switch class {
	case uint8(wire.FaultClassFAULT_MINOR):
		f.minor += n
	case uint8(wire.FaultClassFAULT_MAJOR):
		f.major += n
	default:
		return false
	}
	return true
}

// threadFaults reads thread tid's minflt and majflt (proc(5): the 10th and
// 12th fields of /proc/PID/task/TID/stat, counted after the name's ')').
func threadFaults(t *testing.T, tid uint32) (minor, major uint64) {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/stat", tid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 10 {
		t.Fatalf("thread %d's stat is short: %q", tid, b)
	}
	// f[0] is field 3 (state): minflt is f[7], majflt f[9].
	if minor, err = strconv.ParseUint(f[7], 10, 64); err == nil {
		major, err = strconv.ParseUint(f[9], 10, 64)
	}
	if err != nil {
		t.Fatalf("thread %d's stat: %v", tid, err)
	}
	return minor, major
}
