package bpf

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

func openTracer(t *testing.T, opts Options) *Tracer {
	t.Helper()
	testenv.RequireBPF(t)
	tr, err := Open(opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// drain flushes the pending page-cache runs and reads records until the
// ring buffer has been quiet for a while, or until it reads one stamped
// well after the drain began. Records come out in the order they were
// reserved, each stamped no later than its reservation, so by then every
// record of the I/O the test did before draining has been read. The
// second stop is what ends it on a machine where something else keeps
// reading the disk: block requests are traced disk-wide, so the ring
// buffer never goes quiet there.
func drain(t *testing.T, tr *Tracer, each func(typ uint16, rec []byte)) {
	t.Helper()
	if err := tr.FlushPageRuns(); err != nil {
		t.Fatal(err)
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		t.Fatal(err)
	}
	past := uint64(now.Nano()) + uint64(200*time.Millisecond)
	rd := tr.RingBuf()
	var rec ringbuf.Record
	quiet := 0
	for quiet < 3 {
		rd.SetDeadline(time.Now().Add(50 * time.Millisecond))
		err := rd.ReadInto(&rec)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			quiet++
			continue
		}
		if err != nil {
			t.Fatalf("reading ring buffer: %v", err)
		}
		quiet = 0
		hdr := (*wire.EventHdr)(unsafe.Pointer(&rec.RawSample[0]))
		if hdr.Ts > past {
			return
		}
		each(hdr.Type, rec.RawSample)
	}
}

// coldFile writes a file of n pages, syncs it and drops it from the page
// cache, so that touching its pages must read them from the disk.
func coldFile(t *testing.T, pages int) (*os.File, uint32, uint64) {
	t.Helper()
	buf := make([]byte, pages*4096)
	for i := range buf {
		buf[i] = byte(i / 4096)
	}
	p := testenv.DiskFile(t, buf)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	// Dirty pages survive FADV_DONTNEED: sync first (LAB-NOTES).
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	// One pass can skip a page still referenced just after its writeback:
	// repeat until mincore says the file is out of the cache.
	for try := 0; ; try++ {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
		n := residentPages(t, f, pages)
		if n == 0 {
			break
		}
		if try == 50 {
			t.Fatalf("%d pages of the test file stay in the page cache", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	dev := uint32(unix.Major(st.Dev))<<20 | uint32(unix.Minor(st.Dev))
	return f, dev, st.Ino
}

func residentPages(t *testing.T, f *os.File, pages int) int {
	t.Helper()
	mem, err := unix.Mmap(int(f.Fd()), 0, pages*4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	vec := make([]byte, pages)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// sink keeps the compiler from dropping the loads that fault pages in.
var sink byte

// traceRandomMapping maps a model file's first pages with readahead off
// (MADV_RANDOM: one page per fault, no fault-around of cached pages) and
// starts tracing this process.
func traceRandomMapping(t *testing.T, tr *Tracer, f *os.File, dev uint32, ino uint64, pages int) []byte {
	t.Helper()
	if err := tr.AddFile(dev, ino); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, pages*4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	if err := tr.TracePID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	return mem
}

func TestTouchedPagesFaultAtTheirExactFileOffsets(t *testing.T) {
	f, dev, ino := coldFile(t, 64)
	tr := openTracer(t, Options{Probes: rundir.ProbeSet{PageCache: true}})
	mem := traceRandomMapping(t, tr, f, dev, ino, 64)
	touched := []int{3, 17, 18, 42, 63, 0}
	// On one thread: a touch interrupted by a signal is retried by the
	// same thread, so its two halves pair up (see below).
	runtime.LockOSThread()
	for _, p := range touched {
		sink += mem[p*4096]
	}
	runtime.UnlockOSThread()

	// Per offset, the faults in the order they happened.
	faults := map[uint64][]wire.FaultEvent{}
	added := map[uint64]bool{}
	drain(t, tr, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_FAULT):
			e := *(*wire.FaultEvent)(unsafe.Pointer(&rec[0]))
			if e.Ino == ino && e.Dev == dev {
				faults[e.FileOff] = append(faults[e.FileOff], e)
			}
		case uint32(wire.EventTypeEV_PAGE_RUN):
			// A run's record ends after the bitmap words it needs.
			var e wire.PageRunEvent
			copy(unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e)), rec)
			if e.Ino == ino && e.Kind == uint16(wire.EventTypeEV_PAGE_ADD) {
				e.Ranges(func(first, n uint64) {
					for i := range n {
						added[first+i] = true
					}
				})
			}
		}
	})

	var want, got []uint64
	for _, p := range touched {
		want = append(want, uint64(p)*4096)
	}
	for off, seq := range faults {
		got = append(got, off)
		// The kernel counts a fault major when it read the page. If a
		// signal arrives while the read is under way (Go preempts its
		// threads with SIGURG), the fault returns to user space
		// unaccounted, the access faults again and finds the page: the
		// kernel's own majflt then counts a minor fault, and so do we.
		classes := ""
		for _, e := range seq {
			classes += fmt.Sprint(e.Class)
			if e.StartTs == 0 || e.Hdr.Ts < e.StartTs {
				t.Errorf("fault at offset %d: start %d end %d", off, e.StartTs, e.Hdr.Ts)
			}
			if e.Addr != uint64(uintptr(unsafe.Pointer(&mem[0])))+off {
				t.Errorf("fault at offset %d: address %#x does not match the mapping", off, e.Addr)
			}
		}
		if classes != "1" && classes != "20" && classes != "21" {
			t.Errorf("faults at offset %d have classes %s, want one major (1) or an interrupted one and its retry (20, 21)", off, classes)
		}
	}
	sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	if len(got) != len(want) {
		t.Fatalf("faults at offsets %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("faults at offsets %v, want %v", got, want)
		}
	}
	for _, p := range touched {
		if !added[uint64(p)] {
			t.Errorf("page %d was not reported added to the page cache", p)
		}
	}
	lost := lostEvents(t, tr)
	for typ, n := range lost {
		if n != 0 {
			t.Errorf("lost %d %s events", n, typ)
		}
	}
}

// A mapping that starts mid-file: the fault's file offset is the page
// offset of the mapping (vm_pgoff, in pages of this machine's size) plus
// the distance into it, exactly the byte the toucher touched.
func TestAFaultInAMappingThatStartsMidFileIsAtTheTouchedFileOffset(t *testing.T) {
	const pages, from, touch, within = 32, 5, 7, 123
	ps := os.Getpagesize()
	f, dev, ino := coldFile(t, pages)
	tr := openTracer(t, Options{})
	if err := tr.AddFile(dev, ino); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(f.Fd()), int64(from*ps), (pages-from)*ps, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	if err := tr.TracePID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	sink += mem[touch*ps+within]
	want := uint64((from+touch)*ps + within)
	var got []uint64
	drain(t, tr, func(typ uint16, rec []byte) {
		if uint32(typ) == uint32(wire.EventTypeEV_FAULT) {
			e := (*wire.FaultEvent)(unsafe.Pointer(&rec[0]))
			if e.Ino == ino && e.Dev == dev {
				got = append(got, e.FileOff)
			}
		}
	})
	if len(got) == 0 {
		t.Fatal("no fault recorded in the mapping")
	}
	for _, off := range got {
		if off != want {
			t.Errorf("fault at file offset %d, the toucher touched %d", off, want)
		}
	}
}

func TestOpenRejectsABadRingBufferSize(t *testing.T) {
	for _, n := range []int{100, 3 << 20} {
		if _, err := Open(Options{RingBufBytes: n}); err == nil {
			t.Errorf("Open with a %d-byte ring buffer succeeded", n)
		}
	}
}

func TestAFullRingBufferCountsLostEventsByType(t *testing.T) {
	f, dev, ino := coldFile(t, 256)
	// One page of ring buffer holds a few dozen events; nobody drains it.
	// A record per folio: one page add per page touched.
	tr := openTracer(t, Options{RingBufBytes: os.Getpagesize(), PageRecords: PageFolios})
	mem := traceRandomMapping(t, tr, f, dev, ino, 256)
	for p := 0; p < 256; p++ {
		sink += mem[p*4096]
	}
	lost := lostEvents(t, tr)
	if lost["fault"] == 0 || lost["page_add"] == 0 {
		t.Fatalf("lost = %v, want faults and page adds lost", lost)
	}
	var got int
	drain(t, tr, func(uint16, []byte) { got++ })
	// What was kept plus what was lost is what happened: at least one
	// fault and one page add per page touched.
	if uint64(got)+lost["fault"]+lost["page_add"] < 2*256 {
		t.Fatalf("kept %d + lost %v < %d", got, lost, 2*256)
	}
}

func TestAFaultOnABadAddressIsReportedUnaccounted(t *testing.T) {
	// The record of each fault is what is checked: one by one.
	tr := openTracer(t, Options{Probes: rundir.ProbeSet{Faults: true}})
	if err := tr.TracePID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	// Same thread for the bad access and the next fault: the pending
	// start is reported when that thread faults again.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// A page the process may not read: the kernel refuses the access
	// before handling (and accounting) any fault.
	guard, err := unix.Mmap(-1, 0, 4096, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(guard)
	bad := uint64(uintptr(unsafe.Pointer(&guard[0])))
	old := debug.SetPanicOnFault(true)
	func() {
		defer func() { recover() }()
		sink += guard[0]
	}()
	debug.SetPanicOnFault(old)
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	mem[0] = 1
	unix.Munmap(mem)

	found := false
	drain(t, tr, func(typ uint16, rec []byte) {
		if uint32(typ) != uint32(wire.EventTypeEV_FAULT) {
			return
		}
		e := (*wire.FaultEvent)(unsafe.Pointer(&rec[0]))
		if e.Addr == bad {
			found = true
			if e.Class != uint8(wire.FaultClassFAULT_UNACCOUNTED) || e.StartTs == 0 {
				t.Errorf("bad access reported as class %d start %d", e.Class, e.StartTs)
			}
		}
	})
	if !found {
		t.Fatal("the fault on a bad address was not reported")
	}
}

// mmapAt maps n pages of f (from page pgoff; f nil: anonymous) at addr
// with flags beside MAP_SHARED or MAP_PRIVATE, and returns the address.
func mmapAt(t *testing.T, addr uintptr, n int, f *os.File, pgoff int, flags int) uintptr {
	t.Helper()
	fd := ^uintptr(0)
	kind := unix.MAP_SHARED
	if f != nil {
		fd = f.Fd()
	} else {
		kind = unix.MAP_PRIVATE | unix.MAP_ANONYMOUS
	}
	a, _, e := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(n*os.Getpagesize()), unix.PROT_READ, uintptr(kind|flags), fd, uintptr(pgoff*os.Getpagesize()))
	if e != 0 {
		t.Fatalf("mmap: %v", e)
	}
	if f != nil {
		if _, _, e := unix.Syscall(unix.SYS_MADVISE, a, uintptr(n*os.Getpagesize()), unix.MADV_RANDOM); e != 0 {
			t.Fatalf("madvise: %v", e)
		}
	}
	return a
}

// touch reads one byte at addr, faulting its page in.
func touch(addr uintptr) { sink += *(*byte)(unsafe.Add(unsafe.Pointer(nil), addr)) }

// The fault path remembers each process's recent mappings: a fault after
// the mapping at an address changed — replaced by MAP_FIXED, unmapped and
// mapped anew, moved by mremap, or replaced by anonymous memory — must be
// charged to what is mapped there at the fault, never to what was.
func TestAFaultAfterItsMappingChangedIsAtWhatIsMappedNow(t *testing.T) {
	const pages = 16
	ps := uintptr(os.Getpagesize())
	type want struct {
		ino uint64
		off uint64
	}
	tests := []struct {
		name string
		// run touches pages and returns, in touch order, the file and
		// offset each touch must be charged to.
		run func(t *testing.T, a, b *os.File, ia, ib uint64) []want
	}{
		{"replaced by MAP_FIXED", func(t *testing.T, a, b *os.File, ia, ib uint64) []want {
			m := mmapAt(t, 0, 8, a, 0, 0)
			touch(m + 1*ps)
			mmapAt(t, m, 8, b, 2, unix.MAP_FIXED)
			touch(m + 1*ps)
			return []want{{ia, uint64(1 * ps)}, {ib, uint64(3 * ps)}}
		}},
		{"unmapped and mapped anew", func(t *testing.T, a, b *os.File, ia, ib uint64) []want {
			m := mmapAt(t, 0, 8, a, 4, 0)
			touch(m + 2*ps)
			if _, _, e := unix.Syscall(unix.SYS_MUNMAP, m, 8*ps, 0); e != 0 {
				t.Fatal(e)
			}
			mmapAt(t, m, 8, b, 0, unix.MAP_FIXED_NOREPLACE)
			touch(m + 2*ps)
			return []want{{ia, uint64(6 * ps)}, {ib, uint64(2 * ps)}}
		}},
		{"moved by mremap", func(t *testing.T, a, b *os.File, ia, ib uint64) []want {
			m := mmapAt(t, 0, 8, a, 0, 0)
			touch(m + 1*ps)
			to := mmapAt(t, 0, 8, nil, 0, 0) // a free range to move to
			moved, _, e := unix.Syscall6(unix.SYS_MREMAP, m, 8*ps, 8*ps, unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, to, 0)
			if e != 0 {
				t.Fatal(e)
			}
			mmapAt(t, m, 8, b, 8, unix.MAP_FIXED_NOREPLACE)
			touch(moved + 5*ps)
			touch(m + 5*ps)
			return []want{{ia, uint64(1 * ps)}, {ia, uint64(5 * ps)}, {ib, uint64(13 * ps)}}
		}},
		{"replaced by anonymous memory", func(t *testing.T, a, b *os.File, ia, ib uint64) []want {
			m := mmapAt(t, 0, 8, a, 0, 0)
			touch(m + 3*ps)
			mmapAt(t, m, 8, nil, 0, unix.MAP_FIXED)
			touch(m + 3*ps)
			return []want{{ia, uint64(3 * ps)}, {0, 0}}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, da, ia := coldFile(t, pages)
			b, db, ib := coldFile(t, pages)
			// The record of each fault is what is checked, anonymous
			// ones too: one by one.
			tr := openTracer(t, Options{Probes: rundir.ProbeSet{Faults: true}})
			for _, f := range [][2]uint64{{uint64(da), ia}, {uint64(db), ib}} {
				if err := tr.AddFile(uint32(f[0]), f[1]); err != nil {
					t.Fatal(err)
				}
			}
			// One thread: the touches' faults in order, no other thread's.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := tr.TracePID(os.Getpid()); err != nil {
				t.Fatal(err)
			}
			tid := uint32(unix.Gettid())
			wants := tc.run(t, a, b, ia, ib)
			var got []want
			drain(t, tr, func(typ uint16, rec []byte) {
				if uint32(typ) != uint32(wire.EventTypeEV_FAULT) {
					return
				}
				e := (*wire.FaultEvent)(unsafe.Pointer(&rec[0]))
				// A fault retried (VM_FAULT_RETRY) shows its first try as
				// unaccounted: the retry is the one charged.
				if e.Hdr.Tid != tid || e.StartTs == 0 || e.Class == uint8(wire.FaultClassFAULT_UNACCOUNTED) {
					return
				}
				if e.Ino == ia || e.Ino == ib {
					got = append(got, want{e.Ino, e.FileOff &^ uint64(ps-1)})
				} else if e.Ino == 0 && len(got) > 0 && len(got) < len(wants) && wants[len(got)].ino == 0 {
					got = append(got, want{0, 0})
				}
			})
			if fmt.Sprint(got) != fmt.Sprint(wants) {
				t.Errorf("faults charged to %v, want %v (file a %d, b %d)", got, wants, ia, ib)
			}
		})
	}
}

// A page run a flush could not take from its held slot is counted on the
// CPU that tried: the tracer sums every CPU's count, as it does for lost
// events, and a fresh tracer starts from zero.
func TestUnorderedPageRunsAreSummedOverEveryCPU(t *testing.T) {
	testenv.RequireBPF(t)
	tr, err := Open(Options{RingBufBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if n, err := tr.UnorderedPageRuns(); err != nil || n != 0 {
		t.Fatalf("a fresh tracer: %d unordered runs, %v; want 0", n, err)
	}
	cpus, err := ebpf.PossibleCPU()
	if err != nil {
		t.Fatal(err)
	}
	per := make([]uint64, cpus)
	var want uint64
	for i := range per {
		per[i] = uint64(i + 1)
		want += per[i]
	}
	if err := tr.objs.RunsUnordered.Put(uint32(0), per); err != nil {
		t.Fatal(err)
	}
	if n, err := tr.UnorderedPageRuns(); err != nil || n != want {
		t.Errorf("%d unordered runs, %v; want %d", n, err, want)
	}
}

func TestUnfinishedBlockRequestsAreTakenOnceWithTheirIssueStampAndNoCompletion(t *testing.T) {
	tr := openTracer(t, Options{})
	// Requests of a made-up struct request address: the kernel never
	// completes them, as it never completes one whose completion BPF missed.
	start := func(h wire.EventHdr, s IocorrBlkStart) IocorrBlkStart {
		*startHdr(&s) = h
		return s
	}
	held := map[uint64]IocorrBlkStart{
		0xffff000000000100: start(wire.EventHdr{Ts: 300, Token: 4, Type: uint16(wire.EventTypeEV_BLOCK)}, IocorrBlkStart{Sector: 64, Dev: 7 << 20, Bytes: 8192}),
		0xffff000000000200: start(wire.EventHdr{Ts: 200, Token: 3, Type: uint16(wire.EventTypeEV_BLOCK)}, IocorrBlkStart{Sector: 8, Dev: 7 << 20, Bytes: 4096, CmdFlags: 1}),
	}
	for k, v := range held {
		if err := tr.objs.BlkStarts.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := tr.TakeUnfinishedBlockRequests(1000)
	if err != nil {
		t.Fatal(err)
	}
	// Other requests of the machine may be in flight too: ours are found
	// by sector, in issue order.
	var ours []wire.BlockEvent
	for _, e := range evs {
		if e.Dev == 7<<20 {
			ours = append(ours, e)
		}
		if !e.CompletionUnseen() {
			t.Errorf("%+v is not marked completion unseen", e)
		}
	}
	want := []wire.BlockEvent{
		{Hdr: wire.EventHdr{Ts: 1000, Token: 3, Type: uint16(wire.EventTypeEV_BLOCK)}, IssueTs: 200, Sector: 8, Dev: 7 << 20, Bytes: 4096, CmdFlags: 1, Error: -1},
		{Hdr: wire.EventHdr{Ts: 1000, Token: 4, Type: uint16(wire.EventTypeEV_BLOCK)}, IssueTs: 300, Sector: 64, Dev: 7 << 20, Bytes: 8192, Error: -1},
	}
	if !reflect.DeepEqual(ours, want) {
		t.Errorf("taken %+v\nwant %+v", ours, want)
	}
	again, err := tr.TakeUnfinishedBlockRequests(2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range again {
		if e.Dev == 7<<20 {
			t.Errorf("%+v taken twice", e)
		}
	}
	if _, err := tr.BlockCompletionsUnseen(); err != nil {
		t.Error(err)
	}
}

// lostEvents are the tracer's counts of events lost, by type.
func lostEvents(t *testing.T, tr *Tracer) map[string]uint64 {
	t.Helper()
	lost, err := tr.Lost()
	if err != nil {
		t.Fatal(err)
	}
	return lost
}
