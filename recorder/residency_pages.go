package recorder

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
)

// Two ways to read which pages of a file the page cache holds. mincore of
// a mapping of the file looks every page up on its own; cachestat(2)
// (Linux 6.5) counts a byte range's cached pages in one walk of the
// file's page-cache tree, but only counts. A count of 0 or of the whole
// range answers for every page of it, so cachestatPages counts fixed
// chunks and asks mincore only about the chunks partly resident. Measured
// on a 209 MiB model a third resident in 37 runs (2 vCPUs, machine
// shared): 1.5–1.7 ms a snapshot against mincore's 1.4–3.6 ms; chunks of
// 64 pages cost 2.9–4.3 ms (a call each). Halving the partly resident
// ranges down to single pages with cachestat alone walks the tree once
// per level: 4 times mincore's cost. Under a memory limit most chunks
// stay partly resident from token to token, and a count first only adds
// a walk: a chunk the last snapshot found partly resident goes to mincore
// at once (BenchmarkSnapshotOfAPartlyResidentModel), and so does one it
// found evicted (chunkEvicted).

// Snapshot methods, as meta.json's residency_snapshots.method says them.
const (
	methodCachestat = "cachestat"
	methodMincore   = "mincore"
)

// pageMapBuilder appends resident pages in ascending order.
type pageMapBuilder struct{ pm *rundir.PageMap }

func newPageMapBuilder() pageMapBuilder {
	return pageMapBuilder{pm: &rundir.PageMap{Ranges: [][2]int64{}}}
}

func (b pageMapBuilder) add(lo, hi int64) {
	pm := b.pm
	pm.Resident += hi - lo
	if n := len(pm.Ranges); n > 0 && pm.Ranges[n-1][1] == lo {
		pm.Ranges[n-1][1] = hi
		return
	}
	pm.Ranges = append(pm.Ranges, [2]int64{lo, hi})
}

// Calls of a chunk or less are made raw, without telling the Go
// scheduler: neither call sleeps (mincore faults nothing in, cachestat
// only reads the page-cache tree), a chunk takes 20–50 µs, and a
// snapshot makes hundreds of them. Announced as system calls, each one
// that outlasted a tick of the runtime's monitor while the ring's drain
// ran on the other P had its P handed to another thread and back, and
// set the monitor polling every 20 µs again (sysmon and the scheduler
// took 40–50 ms of a cold 16-token run's recorder CPU, perf, session
// 11). A larger call (a whole file: seconds for a model of 100 GiB) goes
// through the scheduler: a raw call holds off every stop of the world
// until it returns.
const rawMaxPages = cachestatChunk

// pageSyscall makes a residency call over pages pages, raw if it is
// short (rawMaxPages).
func pageSyscall(pages int64, trap, a1, a2, a3, a4 uintptr) unix.Errno {
	var errno unix.Errno
	if pages <= rawMaxPages {
		_, _, errno = unix.RawSyscall6(trap, a1, a2, a3, a4, 0, 0)
	} else {
		_, _, errno = unix.Syscall6(trap, a1, a2, a3, a4, 0, 0)
	}
	return errno
}

// mincorePages reads the resident pages of mem, a read-only mapping of a
// whole file; vec has room for one byte per page.
func mincorePages(mem, vec []byte) (*rundir.PageMap, error) {
	b := newPageMapBuilder()
	if len(mem) == 0 {
		return b.pm, nil
	}
	vec = vec[:(len(mem)+kernel.PageSize-1)/kernel.PageSize]
	if errno := pageSyscall(int64(len(vec)), unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])), 0); errno != 0 {
		return nil, fmt.Errorf("mincore: %w", errno)
	}
	for p, v := range vec {
		if v&1 != 0 {
			b.add(int64(p), int64(p)+1)
		}
	}
	return b.pm, nil
}

// errNoCachestat is what cachestatPages returns on a kernel without the
// call (ENOSYS), or a file system it does not serve (EOPNOTSUPP): the
// caller reads the file with mincore alone instead.
var errNoCachestat = errors.New("cachestat is not available")

// cachestatChunk is the pages one cachestat call counts: 2 MiB, the
// largest folio a model's page cache holds here, so a chunk boundary
// rarely cuts one.
const cachestatChunk = 512

// chunkState is what a snapshot found of a chunk: the next snapshot of
// the same file starts from it.
type chunkState uint8

const (
	chunkUnknown chunkState = iota // no snapshot yet
	chunkNone                      // no page resident, none evicted
	chunkAll                       // every page resident
	chunkPart                      // some pages resident
	// chunkEvicted: no page resident, and the page-cache tree holds
	// shadows of evicted ones. cachestat tests each shadow for a recent
	// eviction (workingset_test_recent), mincore only looks it up: over a
	// 326 MiB file nine tenths reclaimed, 8.1 ms of CPU against 5.1 ms
	// (here, in 2 MiB chunks), and in a cold 128 MiB run most of the
	// model's chunks were such chunks after the load. A chunk never read
	// (no shadows: a large model's untouched experts) stays with
	// cachestat, which skips it in one step where mincore looks up each
	// page.
	chunkEvicted
)

// newChunkStates is the history of a file of size bytes before its
// first snapshot.
func newChunkStates(size, chunk int64) []chunkState {
	return make([]chunkState, (size+chunk*kernel.PageSize-1)/(chunk*kernel.PageSize))
}

// cachestatPages reads the resident pages of mem, a read-only mapping of
// the whole of f, as mincorePages does. Both calls walk every page of
// their range; cachestat only counts, so a chunk it finds partly
// resident costs a second walk by mincore. Residency changes little from
// one token to the next, so the chunks' last states (last, one per
// chunk, updated here; a nil or short one is no history) choose the
// first walk: mincore at once for a chunk last partly resident or
// evicted, cachestat for the others, and one cachestat call over the
// whole file when every
// chunk was wholly resident (a run in RAM), walking the chunks only when
// it finds a page missing.
func cachestatPages(f *os.File, mem, vec []byte, chunk int64, last []chunkState) (*rundir.PageMap, error) {
	b := newPageMapBuilder()
	pages := (int64(len(mem)) + kernel.PageSize - 1) / kernel.PageSize
	chunks := (pages + chunk - 1) / chunk
	if int64(len(last)) < chunks {
		last = newChunkStates(int64(len(mem)), chunk)
	}
	if pages > 0 && !slices.ContainsFunc(last[:chunks], func(c chunkState) bool { return c != chunkAll }) {
		n, _, err := cachestatCount(f, 0, pages)
		if err != nil {
			return nil, err
		}
		if n >= pages {
			b.add(0, pages)
			return b.pm, nil
		}
	}
	for c := int64(0); c < chunks; c++ {
		lo := c * chunk
		hi := min(lo+chunk, pages)
		if last[c] != chunkPart && last[c] != chunkEvicted {
			n, evicted, err := cachestatCount(f, lo, hi)
			if err != nil {
				return nil, err
			}
			switch {
			case n == 0 && evicted > 0:
				last[c] = chunkEvicted
				continue
			case n == 0:
				last[c] = chunkNone
				continue
			case n >= hi-lo:
				last[c] = chunkAll
				b.add(lo, hi)
				continue
			}
		}
		part, err := mincorePages(mem[lo*kernel.PageSize:min(hi*kernel.PageSize, int64(len(mem)))], vec)
		if err != nil {
			return nil, err
		}
		switch part.Resident {
		case 0:
			// mincore cannot tell shadows from nothing: the chunk
			// keeps to mincore until a page comes back.
			last[c] = chunkEvicted
		case hi - lo:
			last[c] = chunkAll
		default:
			last[c] = chunkPart
		}
		for _, pr := range part.Ranges {
			b.add(lo+pr[0], lo+pr[1])
		}
	}
	return b.pm, nil
}

// cachestatCount is how many pages of [lo, hi) of f the page cache holds,
// and how many it evicted (whose shadows it still keeps).
func cachestatCount(f *os.File, lo, hi int64) (cached, evicted int64, err error) {
	r := unix.CachestatRange{Off: uint64(lo) * kernel.PageSize, Len: uint64(hi-lo) * kernel.PageSize}
	var cs unix.Cachestat_t
	if errno := pageSyscall(hi-lo, unix.SYS_CACHESTAT, f.Fd(), uintptr(unsafe.Pointer(&r)), uintptr(unsafe.Pointer(&cs)), 0); errno != 0 {
		if errno == unix.ENOSYS || errno == unix.EOPNOTSUPP {
			return 0, 0, fmt.Errorf("%w: %w", errNoCachestat, errno)
		}
		return 0, 0, fmt.Errorf("cachestat of pages [%d, %d): %w", lo, hi, errno)
	}
	return int64(cs.Cache), int64(cs.Evicted), nil
}
