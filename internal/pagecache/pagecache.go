// Package pagecache reads and empties the page cache of one file:
// residency through mincore, eviction after an fsync (dirty pages do not
// drop).
package pagecache

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Residency counts a file's pages in the page cache (mincore over a
// read-only mapping, which itself brings nothing in).
func Residency(path string) (resident, pages int64, err error) {
	pages, err = walkResidency(path, func(_ int64, vec []byte) {
		for _, b := range vec {
			resident += int64(b & 1)
		}
	})
	return resident, pages, err
}

// ResidentRanges lists a file's pages in the page cache as ranges
// [first, end) of page numbers, in order: which pages, not only how many,
// so that residency can be compared tensor by tensor.
func ResidentRanges(path string) (ranges [][2]int64, resident int64, err error) {
	ranges = [][2]int64{}
	_, err = walkResidency(path, func(first int64, vec []byte) {
		for i, b := range vec {
			if b&1 == 0 {
				continue
			}
			p := first + int64(i)
			resident++
			if n := len(ranges); n > 0 && ranges[n-1][1] == p {
				ranges[n-1][1]++
			} else {
				ranges = append(ranges, [2]int64{p, p + 1})
			}
		}
	})
	return ranges, resident, err
}

// walkResidency calls fn with the mincore vector of each window of the
// file, starting at page first.
func walkResidency(path string, fn func(first int64, vec []byte)) (pages int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	ps := int64(os.Getpagesize())
	pages = (size + ps - 1) / ps
	if size == 0 {
		return 0, nil
	}
	// Map in windows so a huge model does not need a huge vector at once.
	const window = 1 << 30
	vec := make([]byte, window/ps)
	for off := int64(0); off < size; off += window {
		n := size - off
		if n > window {
			n = window
		}
		mem, err := unix.Mmap(int(f.Fd()), off, int(n), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return 0, fmt.Errorf("mapping %s for mincore: %w", path, err)
		}
		v := vec[:(n+ps-1)/ps]
		err = mincore(mem, v)
		unix.Munmap(mem)
		if err != nil {
			return 0, fmt.Errorf("mincore %s: %w", path, err)
		}
		fn(off/ps, v)
	}
	return pages, nil
}

// Evict drops one file's pages from the page cache and reports how many
// stayed resident. Dirty pages do not drop (a model just written by
// synth is still dirty), so the file is synced first; pages another
// process holds mapped and locked may still stay, and the count says so.
func Evict(path string) (resident, pages int64, err error) {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return 0, 0, fmt.Errorf("opening %s to evict it: %w", path, err)
	}
	if err := unix.Fsync(int(f.Fd())); err != nil {
		f.Close()
		return 0, 0, fmt.Errorf("syncing %s before eviction: %w", path, err)
	}
	defer f.Close()
	// A page still referenced for a moment after its writeback ended, or
	// sitting in another CPU's LRU batch, is skipped by one pass: try a
	// few times before reporting what stayed.
	for try := 0; ; try++ {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			return 0, 0, fmt.Errorf("evicting %s: %w", path, err)
		}
		resident, pages, err = Residency(path)
		if err != nil || resident == 0 || try == 20 {
			return resident, pages, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// DropCaches syncs and drops the whole system's clean page cache. Only
// on explicit request: it disturbs everything else on the machine.
func DropCaches() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o200); err != nil {
		return fmt.Errorf("dropping caches: %w", err)
	}
	return nil
}

// mincore is not wrapped by x/sys/unix.
func mincore(mem, vec []byte) error {
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}

// DrainLRUBatches moves the folios every CPU holds in its LRU batches
// (pages just read, just mlocked or munlocked wait there, up to 15 a
// batch) onto the lists, so that memory.stat counts them where they
// belong and reclaim can see them. The kernel drains a CPU's batches when
// that CPU runs madvise(MADV_COLD): the calling thread runs one, of a
// scratch page, on each CPU it may run on in turn.
func DrainLRUBatches() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return fmt.Errorf("draining the LRU batches: %w", err)
	}
	scratch, err := unix.Mmap(-1, 0, os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return fmt.Errorf("draining the LRU batches: %w", err)
	}
	defer unix.Munmap(scratch)
	var errs []error
	for c, n := 0, allowed.Count(); n > 0 && c < 64*len(allowed); c++ {
		if !allowed.IsSet(c) {
			continue
		}
		n--
		var one unix.CPUSet
		one.Set(c)
		if err := unix.SchedSetaffinity(0, &one); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := unix.Madvise(scratch, unix.MADV_COLD); err != nil {
			errs = append(errs, err)
		}
	}
	if err := unix.SchedSetaffinity(0, &allowed); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("draining the LRU batches: %w", err)
	}
	return nil
}

// Mapped is a file mapped read-only for mincore of its ranges: the
// mapping itself brings nothing in and charges nothing.
type Mapped struct {
	mem  []byte
	size int64
}

// Map maps the file at path for Resident.
func Map(path string) (*Mapped, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() == 0 {
		return nil, fmt.Errorf("%s is empty", path)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping %s for mincore: %w", path, err)
	}
	return &Mapped{mem: mem, size: st.Size()}, nil
}

// Resident fills vec (grown as needed, returned) with the residency of
// the pages holding bytes [off, off+n) of the file, one byte a page, bit 0
// set for a page in the page cache.
func (m *Mapped) Resident(off, n int64, vec []byte) ([]byte, error) {
	ps := int64(os.Getpagesize())
	a, b := off/ps*ps, min((off+n+ps-1)/ps*ps, m.size)
	if off < 0 || n <= 0 || a >= b {
		return vec[:0], fmt.Errorf("range %d+%d lies outside the file (%d bytes)", off, n, m.size)
	}
	pages := int((b - a + ps - 1) / ps)
	if cap(vec) < pages {
		vec = make([]byte, pages)
	}
	vec = vec[:pages]
	if err := mincore(m.mem[a:b], vec); err != nil {
		return vec[:0], fmt.Errorf("mincore: %w", err)
	}
	return vec, nil
}

// Close unmaps the file.
func (m *Mapped) Close() error { return unix.Munmap(m.mem) }
