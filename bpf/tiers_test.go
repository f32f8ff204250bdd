package bpf

import (
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// The default tier attaches no per-folio page-cache program and records
// no page-cache event, yet every fault with its file offset; the pagecache
// tier records the adds of the same touches. The run's capabilities name
// what the tier left off, and the option that asks for it.
func TestTheDefaultTierRecordsFaultsWithoutPageCacheEvents(t *testing.T) {
	const pages = 16
	touched := []int{1, 5, 9}
	for _, tc := range []struct {
		name      string
		opts      Options
		pageCache bool
	}{
		{"default", Options{}, false},
		{"pagecache", Options{Probes: rundir.ProbeSet{PageCache: true}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, dev, ino := coldFile(t, pages)
			tr := openTracer(t, tc.opts)
			mem := traceRandomMapping(t, tr, f, dev, ino, pages)
			runtime.LockOSThread()
			for _, p := range touched {
				sink += mem[p*4096]
			}
			runtime.UnlockOSThread()
			faulted := map[uint64]bool{}
			added := 0
			drain(t, tr, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(wire.EventTypeEV_FAULT):
					e := *(*wire.FaultEvent)(unsafe.Pointer(&rec[0]))
					if e.Ino == ino && e.Dev == dev {
						faulted[e.FileOff/4096] = true
					}
				case uint32(wire.EventTypeEV_PAGE_RUN), uint32(wire.EventTypeEV_PAGE_ADD), uint32(wire.EventTypeEV_PAGE_DEL):
					added++
				}
			})
			for _, p := range touched {
				if !faulted[uint64(p)] {
					t.Errorf("no fault at page %d (faults at %v)", p, faulted)
				}
			}
			if (added > 0) != tc.pageCache {
				t.Errorf("%d page-cache records, want some: %v", added, tc.pageCache)
			}
			for _, c := range tr.Capabilities() {
				if c.Name != CapPageCache && c.Name != CapReadahead {
					continue
				}
				if taken := c.Path != ""; taken != tc.pageCache || c.Off == tc.pageCache {
					t.Errorf("%s in the %s tier: path %q, off %v (%s)", c.Name, tc.name, c.Path, c.Off, c.Lost)
				}
				if !tc.pageCache && !strings.Contains(c.Lost, "--probe pagecache") {
					t.Errorf("%s left off says %q, want the option that asks for it", c.Name, c.Lost)
				}
			}
		})
	}
}

// The kernel counts a traced process's filemap faults instead of writing
// a record per fault: at least one per touched page of a cold mapping, and
// none for a process it does not trace.
func TestFilemapFaultsAreCountedInTheKernel(t *testing.T) {
	const pages = 16
	touched := []int{2, 6, 11}
	f, dev, ino := coldFile(t, pages)
	tr := openTracer(t, Options{Probes: rundir.ProbeSet{PageCache: true}})
	mem := traceRandomMapping(t, tr, f, dev, ino, pages)
	runtime.LockOSThread()
	for _, p := range touched {
		sink += mem[p*4096]
	}
	runtime.UnlockOSThread()
	records := 0
	drain(t, tr, func(typ uint16, rec []byte) {
		if uint32(typ) == uint32(wire.EventTypeEV_FILEMAP_FAULT) {
			records++
		}
	})
	n, err := tr.FilemapFaults()
	if err != nil {
		t.Fatal(err)
	}
	if n < uint64(len(touched)) || records != 0 {
		t.Errorf("%d filemap faults counted, %d recorded; want at least %d counted, none recorded", n, records, len(touched))
	}
	fresh := openTracer(t, Options{Probes: rundir.ProbeSet{PageCache: true}})
	if m, err := fresh.FilemapFaults(); err != nil || m != 0 {
		t.Errorf("a tracer that traces nothing counted %d (%v)", m, err)
	}
}

// Only a tier whose programs keep page-cache runs runs their flush: the
// default tier has none pending, and its flush would be a program run
// for nothing at every call. The kernel's own run count says which ran.
func TestOnlyATierThatKeepsPageRunsRunsTheirFlush(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		wantN uint64
	}{
		{"default", Options{}, 0},
		{"pagecache", Options{Probes: rundir.ProbeSet{PageCache: true}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := openTracer(t, tc.opts)
			stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
			if err != nil {
				t.Fatalf("enabling the kernel's BPF run counts: %v", err)
			}
			defer stats.Close()
			before, err := tr.objs.FlushPageRuns.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if err := tr.FlushPageRuns(); err != nil {
				t.Fatal(err)
			}
			after, err := tr.objs.FlushPageRuns.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if n := after.RunCount - before.RunCount; n != tc.wantN || tr.KeepsPageRuns() != (tc.wantN > 0) {
				t.Errorf("the flush ran %d times, keeps runs %v; want %d", n, tr.KeepsPageRuns(), tc.wantN)
			}
		})
	}
}
