// Command toucher is ground truth for fault attribution: it maps a file,
// turns readahead off for the mapping (MADV_RANDOM) so that every first
// touch of a cold page is exactly one major fault of exactly that page,
// and touches a given list of pages in order.
//
//	toucher -file model.gguf -pages 3,17,42 [-random [-seed S]] [-evict] [-wait] [-advice random|normal|sequential] [-churn]
//
// It prints one JSON object: the mapping's address, the page size, the
// pages and file offsets in the order touched, how many of the file's
// pages were resident before the touches, and its own major/minor fault
// counts. -random touches the listed pages in a shuffled order (seeded
// by -seed, or by the clock; the seed is reported), so that a test does
// not depend on faults arriving in file order. -wait holds the touches
// back, once the file is mapped (and evicted), until a byte arrives on
// stdin or SIGUSR1 does: a tracer can attach to the pid it prints on
// stderr first. An end of stdin is not a go: it then waits for the signal.
// -advice other than random lets the kernel read ahead: then the first
// fault on a cold page reads read_ahead_kb around it, and touches inside
// that window are not major faults (testkit/llmtest measures this).
// -churn has a second thread change the protection of a populated
// region of anonymous memory in a loop while the pages are touched: each
// call holds the process's mmap lock for writing, as a program's
// allocator's calls do, and a tracer that looks mappings up under that
// lock must not lose the touches' faults. The faults it adds are none:
// the region is populated when mapped, before the touches.
// -reuse, once the pages are touched, unmaps the file and maps anonymous
// memory at the same address (huge pages off), then writes the same pages
// of it: as many faults again, at the file's old addresses, none of them
// the file's (llama.cpp unmaps what of a model went to a GPU, and a
// compute buffer may land there).
//
// The touches run on one locked thread, and "touch" reports the thread's
// time over them as the scheduler counts it (on the CPU: its
// CLOCK_THREAD_CPUTIME_ID, which brings the running thread's count up to
// date, where schedstat's first field lags by up to a tick; runnable
// waiting for a CPU: schedstat's second, current while the thread runs),
// beside the wall time: what is neither is the time the thread slept, the
// oracle of iocorr's fault wait.
//
// On a cold file majflt equals the number of distinct pages touched, as
// long as: readahead is off (MADV_RANDOM: without it one fault reads up to
// read_ahead_kb and later pages are minor faults or none); the page cache
// makes order-0 folios for these faults (it does with VM_RAND_READ: no
// readahead, so no large folio covering a neighbour); no other process
// maps the file (POSIX_FADV_DONTNEED leaves mapped pages); the file is on
// a block device (tmpfs/shmem faults are minor); and the toucher's own
// binary is cached (its text faults count too). A page touched twice
// faults once: the second read finds the PTE.
//
// Asynchronous preemption is off: Go preempts a thread with a signal, and
// a signal that lands while a fault waits for its read makes the kernel
// return to user space with the fault unaccounted; the retry then finds
// the page and counts a minor fault. Ground truth must not depend on that,
// so the toucher re-executes itself with GODEBUG=asyncpreemptoff=1.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

type report struct {
	Mapping  uint64  `json:"mapping"`
	PageSize int     `json:"page_size"`
	Offsets  []int64 `json:"offsets"` // file offset of each touch, in order
	Resident int     `json:"resident_before"`
	// EvictTries is how many fsync+DONTNEED rounds -evict took to leave
	// no page resident (0 without -evict).
	EvictTries int   `json:"evict_tries"`
	MajFlt     int64 `json:"majflt"`
	MinFlt     int64 `json:"minflt"`
	// Sum of the bytes read, printed so that the reads are not dead code.
	Sum   int     `json:"sum"`
	Pages []int64 `json:"pages"` // in the order touched
	// Seed of the shuffle with -random.
	Seed *uint64 `json:"seed,omitempty"`
	// WokenBy says what ended -wait: "stdin" or "SIGUSR1".
	WokenBy string `json:"woken_by,omitempty"`
	// Churned is how many protection rounds -churn made while the
	// pages were touched.
	Churned int64 `json:"churned,omitempty"`
	// Reused is how many pages -reuse wrote in the anonymous memory that
	// took the file's place.
	Reused int `json:"reused,omitempty"`
	// Touch is the touching thread's time over the touches.
	Touch threadTime `json:"touch"`
}

// threadTime is a thread's wall time over a span and what the scheduler
// counted of it (ns): on the CPU, and runnable waiting for one.
type threadTime struct {
	WallNS     int64 `json:"wall_ns"`
	OnCPUNS    int64 `json:"on_cpu_ns"`
	RunQueueNS int64 `json:"run_queue_ns"`
}

// schedstat reads the calling thread's on-CPU and run-queue time (ns).
func schedstat() (onCPU, runQueue int64) {
	b, err := os.ReadFile("/proc/thread-self/schedstat")
	if err != nil {
		fail("%v", err)
	}
	var lagging, slices int64
	if _, err := fmt.Sscan(string(b), &lagging, &runQueue, &slices); err != nil {
		fail("parsing schedstat %q: %v", b, err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		fail("clock_gettime: %v", err)
	}
	return ts.Nano(), runQueue
}

func fail(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "toucher: "+format+"\n", a...)
	os.Exit(1)
}

func main() {
	if !strings.Contains(os.Getenv("GODEBUG"), "asyncpreemptoff=1") {
		self, err := os.Executable()
		if err != nil {
			fail("%v", err)
		}
		env := append(os.Environ(), "GODEBUG=asyncpreemptoff=1")
		fail("re-executing itself: %v", syscall.Exec(self, os.Args, env))
	}
	file := flag.String("file", "", "file to map")
	pagesArg := flag.String("pages", "", "comma-separated page numbers to touch, in order")
	evict := flag.Bool("evict", false, "sync the file and drop it from the page cache first")
	wait := flag.Bool("wait", false, "wait for a byte on stdin or SIGUSR1 before touching")
	random := flag.Bool("random", false, "touch the listed pages in a shuffled order")
	seed := flag.Uint64("seed", 0, "seed of the -random shuffle (default: from the clock)")
	advice := flag.String("advice", "random", "madvise of the mapping: random (one fault per page), normal or sequential (kernel readahead)")
	churn := flag.Bool("churn", false, "map and unmap anonymous memory from another thread while touching")
	reuse := flag.Bool("reuse", false, "then unmap the file, map anonymous memory in its place and write the same pages")
	flag.Parse()
	if *file == "" || *pagesArg == "" {
		fail("-file and -pages are required")
	}
	f, err := os.Open(*file)
	if err != nil {
		fail("%v", err)
	}
	st, err := f.Stat()
	if err != nil {
		fail("%v", err)
	}
	ps := os.Getpagesize()
	var rep report
	rep.PageSize = ps
	for _, s := range strings.Split(*pagesArg, ",") {
		p, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil || p < 0 || p*int64(ps) >= st.Size() {
			fail("page %q is not in the file (%d pages)", s, (st.Size()+int64(ps)-1)/int64(ps))
		}
		rep.Pages = append(rep.Pages, p)
	}
	if *random {
		sd := *seed
		if !isFlagSet("seed") {
			sd = uint64(time.Now().UnixNano())
		}
		rep.Seed = &sd
		r := rand.New(rand.NewPCG(sd, sd^0x9e3779b97f4a7c15))
		r.Shuffle(len(rep.Pages), func(i, j int) { rep.Pages[i], rep.Pages[j] = rep.Pages[j], rep.Pages[i] })
	} else if isFlagSet("seed") {
		fail("-seed needs -random")
	}
	// Map before evicting: mincore needs a mapping to say what is
	// resident, and an untouched mapping holds no page in the cache.
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fail("mmap: %v", err)
	}
	// Readahead off: each first touch of a cold page reads that page only.
	// The other advices exist to measure what readahead does instead.
	adv, ok := map[string]int{"random": unix.MADV_RANDOM, "normal": unix.MADV_NORMAL, "sequential": unix.MADV_SEQUENTIAL}[*advice]
	if !ok {
		fail("-advice %q: want random, normal or sequential", *advice)
	}
	if err := unix.Madvise(mem, adv); err != nil {
		fail("madvise: %v", err)
	}
	vec := make([]byte, (len(mem)+ps-1)/ps)
	resident := func() int {
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			fail("mincore: %v", e)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	if *evict {
		// Dirty pages do not drop: sync first. A page under writeback
		// or still in another CPU's LRU batch can survive one round, so
		// retry a few times; what stays is reported, not hidden.
		for rep.EvictTries < 20 {
			rep.EvictTries++
			if err := unix.Fsync(int(f.Fd())); err != nil {
				fail("fsync: %v", err)
			}
			if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
				fail("fadvise: %v", err)
			}
			if resident() == 0 {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	rep.Resident = resident()
	if *wait {
		rep.WokenBy = waitForGo(mem)
	}
	rep.Mapping = uint64(uintptr(unsafe.Pointer(&mem[0])))
	// Offsets first, so that the touch loop allocates nothing: only the
	// listed pages of the file fault while it runs.
	rep.Offsets = make([]int64, len(rep.Pages))
	for i, p := range rep.Pages {
		rep.Offsets[i] = p * int64(ps)
	}
	// The scheduler's counts are per thread: the touches stay on this one.
	runtime.LockOSThread()
	var stopChurn func() int64
	if *churn {
		stopChurn = startChurn()
	}
	cpu0, rq0 := schedstat()
	t0 := time.Now()
	for _, off := range rep.Offsets {
		rep.Sum += int(mem[off])
	}
	wall := time.Since(t0)
	cpu1, rq1 := schedstat()
	runtime.UnlockOSThread()
	rep.Touch = threadTime{WallNS: wall.Nanoseconds(), OnCPUNS: cpu1 - cpu0, RunQueueNS: rq1 - rq0}
	if stopChurn != nil {
		rep.Churned = stopChurn()
	}
	if *reuse {
		rep.Reused = reuseAnonymous(mem, rep.Offsets)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	rep.MajFlt, rep.MinFlt = ru.Majflt, ru.Minflt
	json.NewEncoder(os.Stdout).Encode(rep)
}

// reuseAnonymous unmaps mem, maps anonymous memory at its address and
// writes a byte at each of offs; it returns the pages written. Bare
// system calls, and MAP_FIXED_NOREPLACE: the address must be mem's, and
// nothing else may be mapped in between.
func reuseAnonymous(mem []byte, offs []int64) int {
	addr, n := unsafe.Pointer(&mem[0]), uintptr(len(mem))
	if err := unix.MunmapPtr(addr, n); err != nil {
		fail("munmap: %v", err)
	}
	p, err := unix.MmapPtr(-1, 0, addr, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil || p != addr {
		fail("anonymous mmap at %p: %p, %v", addr, p, err)
	}
	anon := unsafe.Slice((*byte)(p), n)
	// One fault per page written, not one per huge page.
	if err := unix.Madvise(anon, unix.MADV_NOHUGEPAGE); err != nil {
		fail("madvise: %v", err)
	}
	seen := map[int64]bool{}
	for _, off := range offs {
		anon[off] = 1
		seen[off] = true
	}
	return len(seen)
}

// startChurn starts a thread that changes the protection of a populated
// anonymous region until the function it returns stops it; it returns
// once the thread is running. Each mprotect walks the region's page
// table under the mmap lock held for writing (32 MiB of 4 KiB pages),
// where mapping and unmapping one page held it too briefly for a fault to
// meet it. Bare system calls: the loop allocates nothing, so the Go heap
// faults nothing in while the pages are touched.
//
// The churn and the calling thread (the toucher's) are put on CPUs of
// their own where the process may use two: a churn that shares the
// touching thread's CPU never runs while a fault looks its mapping up,
// and under a busy `make test` none of 103 faults met the lock held.
func startChurn() (stop func() int64) {
	var done atomic.Bool
	var rounds atomic.Int64
	ended := make(chan struct{})
	toucherCPU, churnCPU := twoCPUs()
	if toucherCPU >= 0 {
		pinTo(toucherCPU)
	}
	const size = 32 << 20
	p, _, e := unix.Syscall6(unix.SYS_MMAP, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE, ^uintptr(0), 0)
	if e != 0 {
		fail("churn mmap: %v", e)
	}
	// Small pages, so that each call walks every one of them.
	if _, _, e := unix.Syscall(unix.SYS_MADVISE, p, size, unix.MADV_NOHUGEPAGE); e != 0 {
		fail("churn madvise: %v", e)
	}
	go func() {
		runtime.LockOSThread()
		if churnCPU >= 0 {
			pinTo(churnCPU)
		}
		for !done.Load() {
			for _, prot := range [2]uintptr{unix.PROT_READ, unix.PROT_READ | unix.PROT_WRITE} {
				if _, _, e := unix.Syscall(unix.SYS_MPROTECT, p, size, prot); e != 0 {
					fail("churn mprotect: %v", e)
				}
			}
			rounds.Add(1)
		}
		close(ended)
	}()
	for rounds.Load() < 10 {
		runtime.Gosched()
	}
	return func() int64 {
		done.Store(true)
		<-ended
		return rounds.Load()
	}
}

// twoCPUs is the first and last CPU the process may run on, -1s where it
// has one.
func twoCPUs() (first, last int) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		fail("sched_getaffinity: %v", err)
	}
	first, last = -1, -1
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			if first < 0 {
				first = c
			}
			last = c
		}
	}
	if first == last {
		return -1, -1
	}
	return first, last
}

// pinTo keeps the calling thread (locked to its goroutine) on cpu.
func pinTo(cpu int) {
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fail("sched_setaffinity to CPU %d: %v", cpu, err)
	}
}

func isFlagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// waitForGo blocks until a byte arrives on stdin or SIGUSR1 does. The
// handler is installed before the "waiting" line, so a tracer that
// signals after reading it never kills the toucher with SIGUSR1's default
// action; afterwards SIGUSR1 is ignored, so a late one cannot interrupt
// a fault and turn it into a minor one on the retry.
func waitForGo(mem []byte) string {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	defer signal.Ignore(syscall.SIGUSR1)
	in := make(chan struct{}, 1)
	go func() {
		var b [1]byte
		if n, _ := os.Stdin.Read(b[:]); n == 1 {
			in <- struct{}{}
		}
	}()
	fmt.Fprintf(os.Stderr, "toucher: pid %d mapped %d bytes at %#x, waiting for a byte on stdin or SIGUSR1\n",
		os.Getpid(), len(mem), uintptr(unsafe.Pointer(&mem[0])))
	select {
	case <-in:
		return "stdin"
	case <-sig:
		return "SIGUSR1"
	}
}
