package doctor

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/rundir"
)

// DiskOptions say how `doctor --disk` measures the disk under a file.
type DiskOptions struct {
	// Depths and Blocks are the queue depths and read sizes measured,
	// every depth at every size (DefaultDepths, DefaultBlocks when nil).
	Depths []int
	Blocks []int64
	// PerPoint is how long each depth × size reads in a round (default
	// 300 ms); a point reads at least MinReads times whatever it takes.
	PerPoint time.Duration
	// Rounds is how often the whole grid is measured (default 3), every
	// other round in reverse, and each point is its rounds' median: the
	// lab's VM disk gave one point 1.9 and 4.1 GB/s nine minutes apart,
	// and the first points of a grid read in one order the disk's burst.
	Rounds int
	// Seed fixes the random offsets.
	Seed uint64
	// Cost is how the prefetch cost is measured after the reads
	// (MeasurePrefetchCost).
	Cost CostOptions
}

var (
	DefaultDepths = []int{1, 2, 4, 8, 16, 32}
	DefaultBlocks = []int64{128 << 10, 1 << 20}
)

// MinDiskFile is the smallest file the measure reads: random 1 MiB
// reads over fewer bytes stay inside a disk's or a host's cache.
const MinDiskFile = 256 << 20

// MinReads is the fewest reads one point takes.
const MinReads = 32

// maxResidentShare is the share of the file the page cache may hold:
// O_DIRECT bypasses it, but a file read lately is likely in the host's
// or the device's cache too, and would measure those.
const maxResidentShare = 0.01

// MeasureDisk measures the whole disk holding file with random, aligned
// O_DIRECT reads of it, and keeps the profile as the disk's
// (rundir.WriteDiskProfile); it returns the profile and where it was kept.
// A file too small, sparse or in the page cache is refused, saying why.
func MeasureDisk(file string, o DiskOptions) (*rundir.DiskProfile, string, error) {
	if o.Depths == nil {
		o.Depths = DefaultDepths
	}
	if o.Blocks == nil {
		o.Blocks = DefaultBlocks
	}
	if o.PerPoint <= 0 {
		o.PerPoint = 300 * time.Millisecond
	}
	if o.Rounds <= 0 {
		o.Rounds = 3
	}
	id, err := blockdev.StatFile(file)
	if err != nil {
		return nil, "", err
	}
	bd, err := blockdev.Of(id)
	if err != nil {
		return nil, "", fmt.Errorf("the disk under %s: %w", file, err)
	}
	if err := checkDiskFile(file, id.Size); err != nil {
		return nil, "", err
	}
	f, err := os.OpenFile(file, os.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, "", fmt.Errorf("opening %s with O_DIRECT: %w", file, err)
	}
	defer f.Close()
	name := blockdev.DiskName(bd)
	d := &rundir.DiskProfile{Device: kernel.DevString(bd.DiskDev) + " " + name, Model: diskModel(bd.DiskDev), Measured: time.Now().UTC()}
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	type point struct {
		depth int
		bs    int64
	}
	var grid []point
	for _, bs := range o.Blocks {
		for _, depth := range o.Depths {
			grid = append(grid, point{depth, bs})
		}
	}
	rounds := make([][]rundir.DiskPoint, len(grid))
	for r := range o.Rounds {
		for k := range grid {
			i := k
			if r%2 == 1 {
				i = len(grid) - 1 - k
			}
			p, err := measurePoint(f, id.Size, grid[i].bs, grid[i].depth, o.PerPoint, rng.Uint64())
			if err != nil {
				return nil, "", fmt.Errorf("reading %s at depth %d, %s reads: %w", file, grid[i].depth, units.ExactSize(grid[i].bs), err)
			}
			rounds[i] = append(rounds[i], p)
		}
	}
	for _, rs := range rounds {
		d.Points = append(d.Points, medianPoint(rs))
	}
	// The reads stand without it: a profile kept without the cost says
	// why, and predict says what it then leaves out.
	if d.PrefetchCost, err = MeasurePrefetchCost(file, o.Cost); err != nil {
		d.PrefetchCostNA = fmt.Sprintf("measuring it failed: %v", err)
	}
	if err := rundir.WriteDiskProfile(bd.DiskDev, d); err != nil {
		return nil, "", err
	}
	return d, rundir.DiskProfilePath(bd.DiskDev), nil
}

// medianPoint is one point's rounds as one: the round of the median
// bandwidth (the upper of an even count), with every round's bandwidth.
func medianPoint(rs []rundir.DiskPoint) rundir.DiskPoint {
	byBW := slices.Clone(rs)
	slices.SortStableFunc(byBW, func(a, b rundir.DiskPoint) int { return cmp.Compare(a.BytesPerSec, b.BytesPerSec) })
	p := byBW[len(byBW)/2]
	p.RoundsBytesPerSec = nil
	for _, r := range rs {
		p.RoundsBytesPerSec = append(p.RoundsBytesPerSec, r.BytesPerSec)
	}
	return p
}

// checkDiskFile refuses a file whose reads would not reach the disk, or
// not enough of it.
func checkDiskFile(file string, size int64) error {
	const advice = "(write one, e.g. `dd if=/dev/urandom of=FILE bs=1M count=1024 oflag=direct`)"
	if size < MinDiskFile {
		return fmt.Errorf("%s is %s: the disk measure reads at random over at least %s of a file, so that no cache holds it %s",
			file, units.ExactSize(size), units.ExactSize(MinDiskFile), advice)
	}
	resident, pages, err := pagecache.Residency(file)
	if err != nil {
		return fmt.Errorf("the page-cache residency of %s: %w", file, err)
	}
	if float64(resident) > maxResidentShare*float64(pages) {
		return fmt.Errorf("%s has %d of its %d pages in the page cache: a file read or written lately measures the caches, not the disk; evict it (`dd if=FILE iflag=nocache count=0`) or use a file written with O_DIRECT %s",
			file, resident, pages, advice)
	}
	exts, err := blockdev.Extents(file)
	if err != nil {
		return fmt.Errorf("where %s lies on the disk: %w", file, err)
	}
	var written uint64
	for _, e := range exts {
		if e.Flags&fiemapExtentUnwritten == 0 {
			written += e.Length
		}
	}
	if float64(written) < 0.9*float64(size) {
		return fmt.Errorf("%s has only %s of its %s written on the disk (holes or preallocated space read as zeros without the disk) %s",
			file, units.ExactSize(int64(written)), units.ExactSize(size), advice)
	}
	return nil
}

// fiemapExtentUnwritten is FIEMAP_EXTENT_UNWRITTEN (linux/fiemap.h):
// space allocated and never written, which reads as zeros.
const fiemapExtentUnwritten = 0x800

// diskModel is the disk's model string from sysfs, "" when it has none.
func diskModel(dev uint32) string {
	b, err := os.ReadFile(filepath.Join("/sys/dev/block", kernel.DevString(dev), "device", "model"))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// measurePoint keeps depth reads of bs bytes in flight, each its own
// goroutine's pread at a random bs-aligned offset, for at least dur and
// MinReads reads.
func measurePoint(f *os.File, size, bs int64, depth int, dur time.Duration, seed uint64) (rundir.DiskPoint, error) {
	slots := (size / bs) - 1
	if slots < 1 {
		return rundir.DiskPoint{}, errors.New("the file is smaller than two reads")
	}
	var (
		mu       sync.Mutex
		reads    int64
		latency  time.Duration
		firstErr error
	)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for g := range depth {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// O_DIRECT needs a buffer aligned to the logical block: an
			// anonymous mapping is page-aligned.
			buf, err := unix.Mmap(-1, 0, int(bs), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
			if err != nil {
				mu.Lock()
				firstErr = cmpErr(firstErr, err)
				mu.Unlock()
				return
			}
			defer unix.Munmap(buf)
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for {
				mu.Lock()
				done := firstErr != nil || (reads >= MinReads && time.Now().After(deadline))
				mu.Unlock()
				if done {
					return
				}
				off := rng.Int64N(slots) * bs
				t0 := time.Now()
				n, err := unix.Pread(int(f.Fd()), buf, off)
				lat := time.Since(t0)
				if err == nil && int64(n) != bs {
					err = fmt.Errorf("a read at %d returned %d bytes", off, n)
				}
				mu.Lock()
				if err != nil {
					firstErr = cmpErr(firstErr, err)
				} else {
					reads++
					latency += lat
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		return rundir.DiskPoint{}, firstErr
	}
	return rundir.DiskPoint{Depth: depth, BlockBytes: bs, BytesPerSec: float64(reads*bs) / elapsed.Seconds(),
		MeanLatencyNs: float64(latency.Nanoseconds()) / float64(reads)}, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}
