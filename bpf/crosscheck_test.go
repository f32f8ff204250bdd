//go:build linux && cgo

package bpf

// Independent observers cross-check iocorr's kernel side: while the
// Tracer records, a second BPF program, written, compiled and loaded
// without any of iocorr's code, watches the same page-cache adds, and an
// ftrace instance of the test's own (testkit/blocktrace) records the
// block read completions; iocorr must have seen exactly what they saw.
//
// How the page-add observer is built, and why this way:
//
// iovisor/gobpf offers two ways to watch kernel events. Its trace-pipe
// reader (pkg/tracepipe) would let ftrace itself format the events, but it
// cannot parse this kernel's output: its line regexp wants a 4-character
// flags column ("d..."), and this kernel prints 5 ("....."), so
// ReadLine returns "received unexpected input" for every line (checked on
// 6.18: 20 of 20 mm_filemap_add_to_page_cache lines refused). It would
// also consume the global trace buffer that other tools may be reading.
// Rewriting lines to fit the regexp would make the test check our rewrite,
// not the kernel, so that way is not used.
//
// Its ELF loader (gobpf/elf) is used instead: its own ELF parser, map
// relocation and bpf()/perf_event_open() calls in cgo, nothing shared with
// cilium/ebpf. The program (testdata/crosscheck/observer.c) uses a classic
// tracepoint with a context struct written by hand from the tracepoint's
// format file, checked against the running kernel's format when it is
// compiled here; it includes neither vmlinux.h nor libbpf. iocorr reads
// the same tracepoint (for folio_order), so this half checks iocorr's
// record layout (vmlinux.h), its file filter and its ring-buffer path.
//
// gobpf attaches a tracepoint with perf_event_open(pid -1, cpu 0): for
// tracepoints the BPF program hangs off the tracepoint itself, not the
// per-CPU perf event, so it runs on every CPU (as bcc relies on too).
//
// Block reads: iocorr reads each request from struct request through
// tp_btf (__sector, __data_len, cmd_flags); the oracle is ftrace's own
// record of block:block_rq_complete (sector, nr_sector, rwbs as the
// kernel formats them), filtered by the kernel to the test files' sectors.
// Not a BPF program: on this VM a completion now and then runs no BPF
// program at all (neither a classic tracepoint's nor a tp_btf one, with
// no recursion miss counted: an ftrace instance next to both showed each
// such completion in softirq on top of one particular task, a
// tokio-rt-worker thread of the VM's agent, PID 1), and a
// classic tracepoint's program is also skipped while another kprobe,
// tracepoint or perf_event program runs on the CPU (bpf_prog_active).
// ftrace records every firing, and counts what it overwrote.
//
// What one side can see and the other not, and how the test handles it:
//   - events before both were attached: the cold files are written,
//     synced and dropped from the cache (coldFile) and their extents are
//     read before either is attached; all test I/O comes after both are;
//   - requests still in flight: every read here is synchronous (a fault,
//     or read() up to EOF, which returns only once every page is up to
//     date, and a request's completion tracepoint fires before its pages
//     are), then iocorr's ring buffer is drained until quiet;
//   - a completion no BPF program saw: iocorr saw the request issued and
//     holds it (blk_starts, or a record with its completion unseen when
//     it was issued again), so it is still one of iocorr's requests, at
//     its sector and size. The comparison is exact: the completions
//     ftrace recorded in the files' extents, as a multiset, are iocorr's
//     requests there, completed or held; one iocorr misses, reports
//     twice, reports wrong or invents fails the test;
//   - a request issued twice (the device refused it, virtio-blk queue
//     full, and it was requeued) completes once: ftrace records one
//     completion, iocorr one request;
//   - other processes' I/O: the observer watches only the test files'
//     inodes and ftrace only their sectors, so nothing else on the
//     machine, however much it reads, reaches either's buffer;
//   - iocorr's ring buffer running full, the observer's map or ftrace's
//     buffer: each is counted (Tracer.Lost, the observer's `dropped` map,
//     the instance's overrun) and must be 0.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	gobpf "github.com/iovisor/gobpf/elf"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/testkit/blocktrace"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// gobpf reads tracepoint ids from the debugfs path only.
const debugTracing = "/sys/kernel/debug/tracing"

// ensureDebugTracing mounts debugfs (which brings tracefs at tracing/)
// when it is not mounted. It stays mounted: other tools expect it there.
func ensureDebugTracing(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(debugTracing + "/events"); err == nil {
		return
	}
	if err := unix.Mount("none", "/sys/kernel/debug", "debugfs", 0, ""); err != nil && err != unix.EBUSY {
		t.Fatalf("mounting debugfs: %v", err)
	}
	if _, err := os.Stat(debugTracing + "/events"); err == nil {
		return
	}
	if err := unix.Mount("nodev", debugTracing, "tracefs", 0, ""); err != nil {
		t.Fatalf("mounting tracefs at %s: %v", debugTracing, err)
	}
	if _, err := os.Stat(debugTracing + "/events"); err != nil {
		t.Fatalf("no tracepoint events under %s: %v", debugTracing, err)
	}
}

type formatField struct{ off, size int }

// tracepointFormat parses events/GROUP/NAME/format: field name → offset, size.
func tracepointFormat(t *testing.T, group, name string) map[string]formatField {
	t.Helper()
	p := filepath.Join(debugTracing, "events", group, name, "format")
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("reading tracepoint format: %v", err)
	}
	defer f.Close()
	fields := map[string]formatField{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "field:") {
			continue
		}
		// field:unsigned char order;	offset:36;	size:1;	signed:0;
		var decl string
		ff := formatField{off: -1, size: -1}
		for _, part := range strings.Split(line, ";") {
			part = strings.TrimSpace(part)
			switch {
			case strings.HasPrefix(part, "field:"):
				decl = strings.TrimPrefix(part, "field:")
			case strings.HasPrefix(part, "offset:"):
				ff.off, _ = strconv.Atoi(strings.TrimPrefix(part, "offset:"))
			case strings.HasPrefix(part, "size:"):
				ff.size, _ = strconv.Atoi(strings.TrimPrefix(part, "size:"))
			}
		}
		words := strings.Fields(decl)
		if len(words) == 0 || ff.off < 0 || ff.size < 0 {
			t.Fatalf("%s: cannot parse %q", p, line)
		}
		n := words[len(words)-1]
		if i := strings.IndexByte(n, '['); i >= 0 {
			n = n[:i]
		}
		fields[n] = ff
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return fields
}

// buildObserver compiles testdata/crosscheck/observer.c against the running
// kernel's tracepoint formats. No -g: gobpf predates BTF and has no use
// for it, and a plain object keeps its loader on its well-trodden path.
func buildObserver(t *testing.T) string {
	t.Helper()
	clang, err := exec.LookPath("clang")
	if err != nil {
		if os.Getenv("IOCORR_REQUIRE_BPF") != "" {
			t.Fatalf("clang is needed to build the cross-check observer: %v", err)
		}
		t.Skip("clang not found; set IOCORR_REQUIRE_BPF=1 to make this a failure")
	}
	args := []string{"-O2", "-target", "bpf", "-Wall", "-Werror", "-c"}
	for _, tp := range []struct {
		group, name, macro string
		fields             []string
	}{
		{"filemap", "mm_filemap_add_to_page_cache", "ADD", []string{"i_ino", "index", "s_dev", "order"}},
	} {
		format := tracepointFormat(t, tp.group, tp.name)
		for _, f := range tp.fields {
			ff, ok := format[f]
			if !ok {
				t.Fatalf("tracepoint %s/%s has no field %s", tp.group, tp.name, f)
			}
			m := "FMT_" + tp.macro + "_" + strings.ToUpper(f)
			args = append(args, fmt.Sprintf("-D%s_OFF=%d", m, ff.off), fmt.Sprintf("-D%s_SIZE=%d", m, ff.size))
		}
	}
	obj := filepath.Join(t.TempDir(), "observer.o")
	args = append(args, filepath.Join("testdata", "crosscheck", "observer.c"), "-o", obj)
	if out, err := exec.Command(clang, args...).CombinedOutput(); err != nil {
		t.Fatalf("compiling the observer: %v\n%s", err, out)
	}
	return obj
}

// C layouts of observer.c's map keys.
type obsFileKey struct {
	Ino uint64
	Dev uint32
	Pad uint32
}

type obsAddKey struct {
	Ino   uint64
	Index uint64
	Dev   uint32
	Order uint32
}

type observer struct {
	m *gobpf.Module
}

// loadObserver loads and attaches the observer: page adds of the given
// files.
func loadObserver(t *testing.T, obj string, files []obsFileKey) *observer {
	t.Helper()
	var m *gobpf.Module
	// The verifier gives up with EAGAIN when a signal is pending for the
	// loading thread, and the Go runtime signals its threads (SIGURG,
	// preemption) at any time. cilium/ebpf retries such loads; gobpf
	// does not, and reports the errno only as text.
	for attempt := 1; ; attempt++ {
		m = gobpf.NewModule(obj)
		err := m.Load(nil)
		if err == nil {
			break
		}
		m.Close()
		if attempt < 20 && strings.Contains(err.Error(), unix.EAGAIN.Error()) {
			continue
		}
		// The message carries gobpf's whole verifier log buffer.
		msg := strings.TrimRight(err.Error(), "\x00")
		if len(msg) > 4000 {
			msg = msg[:4000] + "..."
		}
		t.Fatalf("gobpf: loading the observer (attempt %d): %s", attempt, msg)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("gobpf: closing the observer: %v", err)
		}
	})
	one := uint32(1)
	for i := range files {
		if err := m.UpdateElement(m.Map("files"), unsafe.Pointer(&files[i]), unsafe.Pointer(&one), 0); err != nil {
			t.Fatalf("gobpf: files: %v", err)
		}
	}
	if err := m.EnableTracepoint("tracepoint/filemap/mm_filemap_add_to_page_cache"); err != nil {
		t.Fatalf("gobpf: attaching the page-add program: %v", err)
	}
	return &observer{m: m}
}

func (o *observer) adds(t *testing.T) map[pageKey]uint64 {
	t.Helper()
	out := map[pageKey]uint64{}
	var key, next obsAddKey
	var n uint64
	for {
		ok, err := o.m.LookupNextElement(o.m.Map("adds"), unsafe.Pointer(&key), unsafe.Pointer(&next), unsafe.Pointer(&n))
		if err != nil {
			t.Fatalf("gobpf: reading adds: %v", err)
		}
		if !ok {
			return out
		}
		out[pageKey{next.Dev, next.Ino, next.Index, next.Order}] += n
		key = next
	}
}

func (o *observer) dropped(t *testing.T) uint64 {
	t.Helper()
	var zero uint32
	var n uint64
	if err := o.m.LookupElement(o.m.Map("dropped"), unsafe.Pointer(&zero), unsafe.Pointer(&n)); err != nil {
		t.Fatalf("gobpf: reading dropped: %v", err)
	}
	return n
}

// misses reads the observer programs' recursion-miss counters, by
// "group/name": runs the kernel skipped because a BPF program was already
// running on that CPU (for classic tracepoints: any kprobe, tracepoint or
// perf_event program, or a bpf() map operation of a task preempted or
// interrupted on that CPU: bpf_prog_active).
func (o *observer) misses(t *testing.T) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for pr := range o.m.IterTracepointProgram() {
		name := strings.TrimPrefix(pr.Name, "tracepoint/")
		fd, err := unix.Dup(pr.Fd())
		if err != nil {
			t.Fatal(err)
		}
		p, err := ebpf.NewProgramFromFD(fd)
		if err != nil {
			t.Fatalf("program info of %s: %v", name, err)
		}
		st, err := p.Stats()
		p.Close()
		if err != nil {
			t.Fatalf("program stats of %s: %v", name, err)
		}
		out[name] = st.RecursionMisses
	}
	return out
}

// iocorrMisses reads the same counters of iocorr's programs under test
// (tp_btf programs are guarded per program, not by bpf_prog_active: they
// miss a run only when the same program is already running on that CPU).
func iocorrMisses(t *testing.T, tr *Tracer) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for name, p := range map[string]*ebpf.Program{
		"page_add":       tr.objs.PageAdd,
		"block_issue":    tr.objs.BlockIssue,
		"block_complete": tr.objs.BlockComplete,
	} {
		st, err := p.Stats()
		if err != nil {
			t.Fatalf("program stats of iocorr's %s: %v", name, err)
		}
		out[name] = st.RecursionMisses
	}
	return out
}

func fmtCounts(m map[string]uint64) string {
	var parts []string
	for k, v := range m {
		parts = append(parts, fmt.Sprintf("%s %d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// pageKey is a page-cache add: the folio of 1<<order pages at index.
type pageKey struct {
	dev   uint32
	ino   uint64
	index uint64
	order uint32
}

func (k pageKey) String() string {
	return fmt.Sprintf("ino %d index %d order %d", k.ino, k.index, k.order)
}

// reqKey is a block request: bytes from sector (512 bytes) of dev.
type reqKey struct {
	dev    uint32
	sector uint64
	bytes  uint32
}

func (k reqKey) String() string {
	return fmt.Sprintf("dev %d:%d sector %d bytes %d", k.dev>>20, k.dev&0xfffff, k.sector, k.bytes)
}

// extent is one FIEMAP extent, in bytes.
type extent struct{ logical, physical, length uint64 }

// FIEMAP, from include/uapi/linux/fiemap.h (golang.org/x/sys/unix has no
// definitions for it).
const (
	fsIocFiemap         = 0xc020660b // _IOWR('f', 11, struct fiemap)
	fiemapFlagSync      = 0x1
	fiemapExtentLast    = 0x1
	fiemapExtentUnknown = 0x2
	fiemapExtentDelay   = 0x4
	fiemapExtentEncoded = 0x8
	fiemapExtentAligned = 0x100 // NOT_ALIGNED
	fiemapExtentInline  = 0x200
	fiemapExtentUnwrit  = 0x800
)

type fiemapHdr struct {
	Start         uint64
	Length        uint64
	Flags         uint32
	MappedExtents uint32
	ExtentCount   uint32
	Reserved      uint32
}

type fiemapExtent struct {
	Logical    uint64
	Physical   uint64
	Length     uint64
	Reserved64 [2]uint64
	Flags      uint32
	Reserved   [3]uint32
}

// fileExtents maps the whole file with FS_IOC_FIEMAP. Every extent must
// be plain data on the device, so that a page's disk location is
// physical + (offset - logical).
func fileExtents(t *testing.T, f *os.File) []extent {
	t.Helper()
	const batch = 256
	var req struct {
		hdr fiemapHdr
		ext [batch]fiemapExtent
	}
	var out []extent
	start := uint64(0)
	for {
		req.hdr = fiemapHdr{Start: start, Length: ^uint64(0), Flags: fiemapFlagSync, ExtentCount: batch}
		if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), fsIocFiemap, uintptr(unsafe.Pointer(&req))); errno != 0 {
			t.Fatalf("FS_IOC_FIEMAP on %s: %v", f.Name(), errno)
		}
		n := int(req.hdr.MappedExtents)
		if n == 0 {
			break
		}
		last := false
		for _, e := range req.ext[:n] {
			bad := uint32(fiemapExtentUnknown | fiemapExtentDelay | fiemapExtentEncoded | fiemapExtentAligned |
				fiemapExtentInline | fiemapExtentUnwrit)
			if e.Flags&bad != 0 {
				t.Fatalf("%s: extent %+v (flags %#x) is not plain data at a known place", f.Name(), e, e.Flags)
			}
			out = append(out, extent{e.Logical, e.Physical, e.Length})
			last = e.Flags&fiemapExtentLast != 0
			start = e.Logical + e.Length
		}
		if last {
			break
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: FIEMAP found no extents", f.Name())
	}
	return out
}

// diskOf returns the whole disk under a block device and the device's
// first sector on it: block requests carry the disk and disk sectors.
func diskOf(t *testing.T, dev uint32) (uint32, uint64) {
	t.Helper()
	sys := fmt.Sprintf("/sys/dev/block/%d:%d", dev>>20, dev&0xfffff)
	if _, err := os.Stat(sys); err != nil {
		t.Fatalf("the test files are not on a block device (%v); this test needs one", err)
	}
	if _, err := os.Stat(sys + "/partition"); err != nil {
		return dev, 0
	}
	readInt := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	start, err := strconv.ParseUint(readInt(sys+"/start"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	var maj, min uint32
	if _, err := fmt.Sscanf(readInt(sys+"/../dev"), "%d:%d", &maj, &min); err != nil {
		t.Fatal(err)
	}
	return maj<<20 | min, start
}

// fileReads picks out the read requests in a file's extents.
type fileReads struct {
	name  string
	ext   []extent
	start uint64 // first sector of the file system's device on the disk
}

// has tells whether a request touches the file's extents; one that
// touches them but also reads outside them is reported: the claim that
// sector*512 lands in the extents' physical ranges would then be wrong.
func (fr *fileReads) has(t *testing.T, who string, k reqKey) bool {
	t.Helper()
	if k.sector < fr.start {
		return false
	}
	lo := (k.sector - fr.start) * 512
	hi := lo + uint64(k.bytes)
	var covered uint64
	for _, e := range fr.ext {
		a, b := max(lo, e.physical), min(hi, e.physical+e.length)
		if a < b {
			covered += b - a
		}
	}
	if covered != 0 && covered != uint64(k.bytes) {
		t.Errorf("%s: read request %v covers %d bytes of the %s's extents, not all %d", who, k, covered, fr.name, k.bytes)
	}
	return covered != 0
}

// split keeps the requests in either file's extents: all of them, and
// those of each file.
func split(t *testing.T, who string, reqs map[reqKey]uint64, files ...*fileReads) (map[reqKey]bool, []map[reqKey]bool) {
	t.Helper()
	all := map[reqKey]bool{}
	per := make([]map[reqKey]bool, len(files))
	for i := range per {
		per[i] = map[reqKey]bool{}
	}
	for k := range reqs {
		for i, fr := range files {
			if fr.has(t, who, k) {
				per[i][k] = true
				all[k] = true
			}
		}
	}
	return all, per
}

// sectors are the file's extents as disk sectors, for the ftrace oracle.
func (fr *fileReads) sectors() []blocktrace.Range {
	out := make([]blocktrace.Range, len(fr.ext))
	for i, e := range fr.ext {
		out[i] = blocktrace.Range{Start: fr.start + e.physical/512, End: fr.start + (e.physical+e.length+511)/512}
	}
	return out
}

// sectorOf is the disk sector of a file offset.
func (fr *fileReads) sectorOf(t *testing.T, off uint64) uint64 {
	for _, e := range fr.ext {
		if off >= e.logical && off < e.logical+e.length {
			return fr.start + (e.physical+off-e.logical)/512
		}
	}
	t.Fatalf("%s: offset %d is in no extent", fr.name, off)
	return 0
}

// keys is the set of a multiset, and its total count.
func keys[K comparable](counts map[K]uint64) (map[K]bool, uint64) {
	set := make(map[K]bool, len(counts))
	var n uint64
	for k, c := range counts {
		set[k] = true
		n += c
	}
	return set, n
}

// setDiff reports, readably, what only one of two sets holds.
func setDiff[K comparable](t *testing.T, what, nameA string, a map[K]bool, nameB string, b map[K]bool, str func(K) string) {
	t.Helper()
	var onlyA, onlyB []string
	for k := range a {
		if !b[k] {
			onlyA = append(onlyA, str(k))
		}
	}
	for k := range b {
		if !a[k] {
			onlyB = append(onlyB, str(k))
		}
	}
	if len(onlyA)+len(onlyB) == 0 {
		return
	}
	sort.Strings(onlyA)
	sort.Strings(onlyB)
	clip := func(s []string) string {
		if len(s) == 0 {
			return "\t(none)"
		}
		if len(s) > 40 {
			s = append(s[:40:40], fmt.Sprintf("... and %d more", len(s)-40))
		}
		return "\t" + strings.Join(s, "\n\t")
	}
	t.Errorf("%s differ: %s %d, %s %d\nonly %s (%d):\n%s\nonly %s (%d):\n%s",
		what, nameA, len(a), nameB, len(b), nameA, len(onlyA), clip(onlyA), nameB, len(onlyB), clip(onlyB))
}

func TestCrosscheckPageCacheAndBlockReadsWithGobpf(t *testing.T) {
	testenv.RequireBPF(t)
	ensureDebugTracing(t)
	obj := buildObserver(t)

	// Two cold files, each with its own inode and extents: one read page
	// by page through a MADV_RANDOM mapping, one read sequentially
	// (readahead: large folios, large requests).
	const randPages, seqPages = 1024, 2048 // 4 MiB, 8 MiB
	touched := []int{0, 1, 2, 9, 100, 101, 255, 256, 511, 512, 777, 1000, 1022, 1023}
	rf, dev, rino := coldFile(t, randPages)
	sf, sdev, sino := coldFile(t, seqPages)
	if sdev != dev {
		t.Fatalf("the two test files are on different devices (%#x, %#x)", dev, sdev)
	}
	disk, start := diskOf(t, dev)
	randReads := &fileReads{name: "random-read file", ext: fileExtents(t, rf), start: start}
	seqReads := &fileReads{name: "sequential-read file", ext: fileExtents(t, sf), start: start}
	t.Logf("device %d:%d (disk %d:%d from sector %d); random file ino %d in %d extents, sequential file ino %d in %d extents",
		dev>>20, dev&0xfffff, disk>>20, disk&0xfffff, start, rino, len(randReads.ext), sino, len(seqReads.ext))

	// All three are attached before any of the test's I/O. The
	// observer counts folios, so iocorr records folios too (its runs are
	// checked against its folios in TestPageRunsChargeWhatFoliosCharge).
	tr := openTracer(t, Options{PageRecords: PageFolios})
	for _, ino := range []uint64{rino, sino} {
		if err := tr.AddFile(dev, ino); err != nil {
			t.Fatal(err)
		}
	}
	if err := tr.TracePID(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	obs := loadObserver(t, obj, []obsFileKey{{Ino: rino, Dev: dev}, {Ino: sino, Dev: dev}})
	ct := blocktrace.Start(t, disk, append(randReads.sectors(), seqReads.sectors()...))

	// Random reads: one fault, one page, one 4 KiB request per page.
	mem, err := unix.Mmap(int(rf.Fd()), 0, randPages*4096, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	for _, p := range touched {
		sink += mem[p*4096]
	}
	// Sequential read to EOF: read() returns only when every page is up
	// to date, so every request it caused has completed.
	buf := make([]byte, 1<<20)
	var total int
	for {
		n, err := sf.ReadAt(buf, int64(total))
		total += n
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if total != seqPages*4096 {
		t.Fatalf("read %d bytes of the sequential file, want %d", total, seqPages*4096)
	}

	// iocorr's side, drained until quiet: its block requests, completed,
	// recorded with their completion unseen (issued again before it
	// came), and still held in blk_starts (issued, no completion seen).
	ioAddCounts := map[pageKey]uint64{}
	ioDiskReads := map[reqKey]uint64{}
	var ioUnseen, ioPending int
	drain(t, tr, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_PAGE_ADD):
			e := (*wire.PageEvent)(unsafe.Pointer(&rec[0]))
			if e.Dev == dev && (e.Ino == rino || e.Ino == sino) {
				ioAddCounts[pageKey{e.Dev, e.Ino, e.Index, e.Order}]++
			}
		case uint32(wire.EventTypeEV_BLOCK):
			e := (*wire.BlockEvent)(unsafe.Pointer(&rec[0]))
			if e.Dev == disk && kernel.BlockOpOf(e.CmdFlags) == kernel.BlockRead {
				ioDiskReads[reqKey{e.Dev, e.Sector, e.Bytes}]++
				if e.CompletionUnseen() {
					ioUnseen++
				}
			}
		}
	})
	ct.Stop(t)
	{
		var rq uint64
		var bs IocorrBlkStart
		it := tr.objs.BlkStarts.Iterate()
		for it.Next(&rq, &bs) {
			if bs.Dev == disk && kernel.BlockOpOf(bs.CmdFlags) == kernel.BlockRead {
				ioDiskReads[reqKey{bs.Dev, bs.Sector, bs.Bytes}]++
				ioPending++
			}
		}
		if err := it.Err(); err != nil {
			t.Fatalf("reading iocorr's blk_starts: %v", err)
		}
	}
	lost := lostEvents(t, tr)
	for typ, n := range lost {
		if n != 0 {
			t.Errorf("iocorr lost %d %s events", n, typ)
		}
	}

	// The observer's side, and ftrace's.
	if d := obs.dropped(t); d != 0 {
		t.Errorf("the observer's map overflowed: %d page adds dropped", d)
	}
	obAddCounts := obs.adds(t)
	ftCounts := map[reqKey]uint64{}
	for _, c := range ct.Completions {
		ftCounts[reqKey{disk, c.Sector, uint32(c.Sectors * 512)}]++
	}

	ioAdds, ioAddEvents := keys(ioAddCounts)
	obAdds, obAddEvents := keys(obAddCounts)
	ioReads, _ := split(t, "iocorr", ioDiskReads, randReads, seqReads)
	ftReads, ftFile := split(t, "ftrace", ftCounts, randReads, seqReads)
	ftRand, ftSeq := ftFile[0], ftFile[1]

	t.Logf("page adds of the two files: iocorr %d events, %d distinct; observer %d events, %d distinct",
		ioAddEvents, len(ioAdds), obAddEvents, len(obAdds))
	t.Logf("read requests in the files' extents: iocorr %d; ftrace %d completions (%d requeues there)",
		len(ioReads), len(ct.Completions), ct.Requeues)
	_, ioDiskEvents := keys(ioDiskReads)
	t.Logf("all reads on the disk meanwhile: iocorr %d requests, %d of them recorded with their completion unseen, %d still held as issued",
		ioDiskEvents, ioUnseen, ioPending)
	t.Logf("recursion misses: observer %s; iocorr %s", fmtCounts(obs.misses(t)), fmtCounts(iocorrMisses(t, tr)))

	if len(obAdds) == 0 || len(ioAdds) == 0 {
		t.Errorf("no page adds seen: iocorr %d, observer %d", len(ioAdds), len(obAdds))
	}
	if len(ftReads) == 0 || len(ioReads) == 0 {
		t.Errorf("no read requests seen: iocorr %d, ftrace %d", len(ioReads), len(ftReads))
	}
	setDiff(t, "page-cache adds", "iocorr saw", ioAdds, "the gobpf observer saw", obAdds, pageKey.String)
	// Read requests, exactly: each completion ftrace recorded is one of
	// iocorr's requests, once, and iocorr has no other.
	setDiff(t, "read requests", "iocorr has", ioReads, "ftrace saw complete", ftReads, reqKey.String)
	for k := range ftReads {
		if io, ft := ioDiskReads[k], ftCounts[k]; ioReads[k] && io != ft {
			t.Errorf("read request %v: iocorr has it %d times, ftrace saw it complete %d times", k, io, ft)
		}
	}

	// The random part: exactly the touched pages, one order-0 folio and one
	// 4 KiB request at the page's disk location each.
	wantAdds := map[pageKey]bool{}
	wantReads := map[reqKey]bool{}
	for _, p := range touched {
		wantAdds[pageKey{dev, rino, uint64(p), 0}] = true
		wantReads[reqKey{disk, randReads.sectorOf(t, uint64(p)*4096), 4096}] = true
	}
	gotAdds := map[pageKey]bool{}
	for k := range obAdds {
		if k.ino == rino {
			gotAdds[k] = true
		}
	}
	setDiff(t, "random part: page adds", "the touched pages", wantAdds, "added", gotAdds, pageKey.String)
	setDiff(t, "random part: read requests", "the touched pages' sectors", wantReads, "completed", ftRand, reqKey.String)

	// The sequential part: the folios tile the file, each page once, and
	// the requests read each of its bytes once.
	covered := make([]int, seqPages)
	orders := map[uint32]int{}
	for k := range obAdds {
		if k.ino != sino {
			continue
		}
		orders[k.order]++
		for i := k.index; i < k.index+1<<k.order; i++ {
			if i >= seqPages {
				t.Errorf("sequential file: folio %v ends past EOF", k)
				break
			}
			covered[i]++
		}
	}
	for i, n := range covered {
		if n != 1 {
			t.Errorf("sequential file: page %d added %d times", i, n)
		}
	}
	sizes := map[uint32]int{}
	var seqBytes uint64
	var largest uint32
	for k := range ftSeq {
		sizes[k.bytes]++
		seqBytes += uint64(k.bytes)
		largest = max(largest, k.bytes)
	}
	// Each request lies inside the extents (has), so requests that do not
	// overlap and add up to the file's size read each of its bytes once.
	seqSorted := make([]reqKey, 0, len(ftSeq))
	for k := range ftSeq {
		seqSorted = append(seqSorted, k)
	}
	sort.Slice(seqSorted, func(i, j int) bool { return seqSorted[i].sector < seqSorted[j].sector })
	for i := 1; i < len(seqSorted); i++ {
		if prev := seqSorted[i-1]; prev.sector+uint64(prev.bytes)/512 > seqSorted[i].sector {
			t.Errorf("sequential file: requests %v and %v overlap", prev, seqSorted[i])
		}
	}
	if seqBytes != seqPages*4096 {
		t.Errorf("sequential file: requests read %d bytes, want the file's %d", seqBytes, seqPages*4096)
	}
	t.Logf("sequential file: folios by order %v; requests by size %v", orders, sizes)
	// What the sequential part is for: without these the comparison
	// would silently stop covering multi-page folios and large requests.
	// (ext4 adds large folios to the page cache since Linux 6.16.)
	if len(orders) < 2 || orders[0] == len(covered) {
		t.Errorf("sequential file: no multi-page folio (orders %v): the cross-check does not cover them", orders)
	}
	if largest <= 4096 {
		t.Errorf("sequential file: no request larger than a page (sizes %v)", sizes)
	}
}
