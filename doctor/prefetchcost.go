package doctor

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
)

// The prefetch cost: what a second thread's reads into the page cache of
// a command's memory cgroup cost that command's own compute on this
// machine. A prefetcher's reads push the command's mapped weights out of
// the cgroup, and the kernel unmaps them from the command's page tables
// from the reading CPU; on the lab's VM (PVM, shadow page tables) that
// slowed llama.cpp's user time by ~0.25 ns per byte read, most of a
// decode token's time where the disk is fast, and predict --prefetch
// counted none of it. The measure is a model of that: in a memory cgroup
// smaller than a region of FILE, one thread computes over the region
// mapped (a sum of its words, pass after pass), alone (its own faults read
// the region and reclaim it) and beside a second thread that asks the
// kernel for the region ahead of it, as the prefetcher does
// (POSIX_FADV_WILLNEED). The cost is the compute thread's added user time
// per byte the second thread asked for, the median of pairs run in turn.

// CostOptions say how the prefetch cost is measured.
type CostOptions struct {
	// Region is the bytes of FILE computed over (default 256 MiB), Limit
	// the memory cgroup's (default half the region), Passes how often the
	// compute goes over it (default 2), Pairs the alone/beside pairs
	// (default 3).
	Region, Limit int64
	Passes, Pairs int
}

func (o *CostOptions) defaults() {
	if o.Region <= 0 {
		o.Region = 256 << 20
	}
	if o.Limit <= 0 {
		o.Limit = o.Region / 2
	}
	if o.Passes <= 0 {
		o.Passes = 2
	}
	if o.Pairs <= 0 {
		o.Pairs = 3
	}
}

// costProbeEnv marks the re-executed iocorr that computes over the region.
const costProbeEnv = "IOCORR_DOCTOR_COST_PROBE"

// costRun is one run of the probe: the compute thread's user and system
// time, and the bytes the second thread asked for (0 alone).
type costRun struct {
	UserNS int64 `json:"user_ns"`
	SysNS  int64 `json:"sys_ns"`
	Asked  int64 `json:"asked_bytes"`
	WallNS int64 `json:"wall_ns"`
	// AskNS is the asking thread's own CPU time (user and system) in its
	// calls: the kernel's work of bringing the pages in, reclaim in the
	// cgroup included, which paces a prefetcher's helper.
	AskNS int64 `json:"ask_cpu_ns"`
	// Sum is the compute's result, kept so that the compute is done.
	Sum uint64 `json:"sum"`
}

// MeasurePrefetchCost measures the prefetch cost on the disk holding
// file, a file MeasureDisk accepts (it evicts it before every run).
func MeasurePrefetchCost(file string, o CostOptions) (*rundir.PrefetchCost, error) {
	o.defaults()
	st, err := os.Stat(file)
	if err != nil {
		return nil, err
	}
	if st.Size() < o.Region {
		return nil, fmt.Errorf("%s is smaller than the %d bytes the prefetch cost computes over", file, o.Region)
	}
	// Room beside the cgroup's page cache for the probe's own heap and
	// stacks, which a cgroup charges too.
	cg, err := cgroup.NewMemory(cgroup.Name(os.Getpid())+"-prefetch-cost", o.Limit+16<<20)
	if err != nil {
		return nil, err
	}
	defer cg.Remove()
	pc := &rundir.PrefetchCost{RegionBytes: o.Region, LimitBytes: o.Limit, Passes: o.Passes}
	var perByte, pace []float64
	for i := range o.Pairs {
		var alone, beside costRun
		for k := range 2 {
			withReader := (i+k)%2 == 1
			r, err := runCostProbe(cg, file, o, withReader)
			if err != nil {
				return nil, err
			}
			if withReader {
				beside = r
			} else {
				alone = r
			}
		}
		if beside.Asked == 0 {
			return nil, errors.New("the prefetching thread asked for nothing")
		}
		pc.AloneUserNS = append(pc.AloneUserNS, alone.UserNS)
		pc.BesideUserNS = append(pc.BesideUserNS, beside.UserNS)
		pc.AskedBytes = append(pc.AskedBytes, beside.Asked)
		pc.AskCPUNS = append(pc.AskCPUNS, beside.AskNS)
		perByte = append(perByte, float64(beside.UserNS-alone.UserNS)/float64(beside.Asked))
		pace = append(pace, float64(beside.AskNS)/float64(beside.Asked))
	}
	// A machine where it costs nothing measures noise about 0 either way:
	// a negative median is no saving a prefetch makes.
	pc.ComputeNSPerByte = max(median(perByte), 0)
	pc.AskNSPerByte = median(pace)
	return pc, nil
}

// median is the middle of xs (the upper one of an even count), which it
// sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

// runCostProbe runs the probe once, from a cold region, in cg.
func runCostProbe(cg *cgroup.Cgroup, file string, o CostOptions, withReader bool) (costRun, error) {
	if _, _, err := pagecache.Evict(file); err != nil {
		return costRun{}, err
	}
	cmd, in, out, err := launch.StartHelper(costProbeEnv, "the prefetch cost's probe", nil, cg.Add)
	if err != nil {
		return costRun{}, err
	}
	defer cmd.Wait()
	defer in.Close()
	mode := "alone"
	if withReader {
		mode = "beside"
	}
	if _, err := fmt.Fprintf(in, "%d %d %s %s\n", o.Region, o.Passes, mode, file); err != nil {
		cmd.Process.Kill()
		return costRun{}, fmt.Errorf("the prefetch cost's probe: %w", err)
	}
	var r costRun
	line, err := bufio.NewReader(out).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &r)
	}
	if err != nil {
		cmd.Process.Kill()
		return costRun{}, fmt.Errorf("the prefetch cost's probe said %q: %w", strings.TrimSpace(string(line)), err)
	}
	return r, nil
}

// RunCostProbeIfChild must be called first in main: in the probe it
// reads its one line of work, does it, prints its costRun and exits.
func RunCostProbeIfChild() {
	if !launch.IsHelper(costProbeEnv) {
		return
	}
	if err := costProbe(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "iocorr: the prefetch cost's probe: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// costProbe reads "REGION PASSES alone|beside PATH" and computes.
func costProbe(in io.Reader, out io.Writer) error {
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil {
		return err
	}
	f := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 4)
	if len(f) != 4 || (f[2] != "alone" && f[2] != "beside") {
		return fmt.Errorf("bad line %q", line)
	}
	region, err1 := strconv.ParseInt(f[0], 10, 64)
	passes, err2 := strconv.Atoi(f[1])
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("bad line %q: %w", line, err)
	}
	fh, err := os.Open(f[3])
	if err != nil {
		return err
	}
	defer fh.Close()
	data, err := unix.Mmap(int(fh.Fd()), 0, int(region), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mapping %s: %w", f[3], err)
	}
	defer unix.Munmap(data)
	r := compute(fh, data, passes, f[2] == "beside")
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}

// costAhead is how far ahead of the compute the second thread asks: the
// prefetcher's windows are of that order. It asks in the prefetcher's
// calls (pagecache.WillNeed of blockdev.WillNeedChunk), whose size sets
// how many calls a byte takes.
const costAhead = 16 << 20

// compute sums the region's words pass after pass on a thread of its
// own, whose user and system time it returns; beside, another thread
// asks for the region costAhead ahead of it, and its own CPU time is
// returned too.
func compute(fh *os.File, data []byte, passes int, beside bool) costRun {
	var (
		progress atomic.Int64 // bytes computed over, all passes
		done     atomic.Bool
		asked    int64
		askNS    int64
		readerCh = make(chan struct{})
	)
	size := int64(len(data))
	total := size * int64(passes)
	if beside {
		// The compute starts once the asking thread runs: on a busy
		// machine a short region was summed before the goroutine was
		// scheduled, and nothing was asked beside it.
		running := make(chan struct{})
		go func() {
			defer close(readerCh)
			runtime.LockOSThread()
			chunk := blockdev.WillNeedChunk(fh)
			t0 := threadCPU()
			close(running)
			next := int64(0) // bytes asked for, all passes
			for !done.Load() && next < total {
				if next >= progress.Load()+costAhead {
					time.Sleep(50 * time.Microsecond)
					continue
				}
				off := next % size
				n := min(chunk, size-off)
				_ = pagecache.WillNeed(fh, off, n, chunk)
				next += n
				asked += n
			}
			askNS = threadCPU() - t0
		}()
		<-running
	} else {
		close(readerCh)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &before)
	start := time.Now()
	var sum uint64
	const page = 4096
	for p := range passes {
		for off := 0; off < len(data); off += page {
			words := unsafe.Slice((*uint64)(unsafe.Pointer(&data[off])), page/8)
			for _, w := range words {
				sum += w
			}
			if off&(1<<20-1) == 0 {
				progress.Store(int64(p)*size + int64(off))
			}
		}
	}
	wall := time.Since(start)
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &after)
	done.Store(true)
	<-readerCh
	return costRun{
		UserNS: syscall.TimevalToNsec(syscall.Timeval(after.Utime)) - syscall.TimevalToNsec(syscall.Timeval(before.Utime)),
		SysNS:  syscall.TimevalToNsec(syscall.Timeval(after.Stime)) - syscall.TimevalToNsec(syscall.Timeval(before.Stime)),
		Asked:  asked,
		WallNS: wall.Nanoseconds(),
		AskNS:  askNS,
		Sum:    sum,
	}
}

// threadCPU is the calling thread's user and system time so far.
func threadCPU() int64 {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_THREAD, &ru)
	return syscall.TimevalToNsec(syscall.Timeval(ru.Utime)) + syscall.TimevalToNsec(syscall.Timeval(ru.Stime))
}
