package prefetch

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/procmaps"
)

// releaser tells the kernel, once a layer has used the pages the
// prefetcher brought in for it, that they may go first:
// process_madvise(MADV_COLD) on the command's mapping of them clears
// their young bits and deactivates them. Without it reclaim under a tight
// budget gives each page the layer just read a second pass (its mapping
// is young) and evicts instead the pages asked for the slices the layer
// has not reached yet, whose faults then read around them and push out
// more: the bench's qwen3moe at 96 MiB ran 4.4–6.4 tokens/s with 172–311
// such faults, 9.7–10.8 with 9–50 once released (2026-12-06).
//
// Only pages the prefetcher brought in are released: a page the cache
// kept since an earlier token is one the budget can hold between uses
// (a skewed router's hot experts), and releasing it would give that up.
type releaser struct {
	pid   int
	pidfd int
	maps  []procmaps.Mapping
	iov   []remoteIovec
	// failed is set after the first failure: the command's kernel or
	// privileges refuse it, and the run goes on without.
	failed bool
	// unmapped are the models the command was found not to map, after
	// its maps were read again for them (loaded with --no-mmap, or on a
	// GPU): their pages are in no page table to advise.
	unmapped map[*model]bool
	mapped   bool // some model's pages were found mapped
}

func (rl *releaser) close() {
	if rl.pidfd > 0 {
		unix.Close(rl.pidfd)
		rl.pidfd = 0
	}
}

// open follows the command's process pid: a new pid reopens its pidfd
// and maps.
func (rl *releaser) open(pid int) error {
	if pid == rl.pid && rl.pidfd > 0 {
		return nil
	}
	rl.close()
	rl.pid, rl.maps = pid, nil
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	rl.pidfd = fd
	return rl.reload()
}

func (rl *releaser) reload() error {
	ms, err := procmaps.Read(rl.pid)
	if err != nil {
		return err
	}
	rl.maps = ms
	return nil
}

// addresses appends to rl.iov the command's addresses of file bytes
// [off, end) of m, and says whether the file was mapped at all.
func (rl *releaser) addresses(m *model, off, end uint64) bool {
	found := false
	for _, mp := range rl.maps {
		if mp.Inode != m.ino || kernel.Dev(mp.Major, mp.Minor) != m.dev {
			continue
		}
		found = true
		lo, hi := max(off, mp.Offset), min(end, mp.Offset+(mp.End-mp.Start))
		if lo >= hi {
			continue
		}
		rl.iov = append(rl.iov, remoteIovec{base: uintptr(mp.Start + lo - mp.Offset), len: uintptr(hi - lo)})
	}
	return found
}

// remoteIovec is struct iovec of addresses in the command: not Go
// pointers, so not unix.Iovec's *byte.
type remoteIovec struct{ base, len uintptr }

// iovMax is the kernel's UIO_MAXIOV: process_madvise takes no more
// vectors a call.
const iovMax = 1024

// release advises MADV_COLD for the pages w's calls brought in, in
// process pid; it returns the bytes advised.
func (rl *releaser) release(w *window, pid int) (int64, error) {
	if rl.failed {
		return 0, nil
	}
	if err := rl.open(pid); err != nil {
		rl.failed = true
		return 0, err
	}
	ps := uint64(kernel.PageSize)
	rl.iov = rl.iov[:0]
	reloaded := false
	for _, r := range w.ranges {
		for _, c := range r.calls {
			off, end := uint64(r.first+int64(c.lo))*ps, uint64(r.first+int64(c.hi))*ps
			if rl.addresses(r.m, off, end) {
				rl.mapped = true
				continue
			}
			// A model mapped after the maps were read (a second file of a
			// split model) is found by reading them again, once a window.
			if rl.unmapped[r.m] {
				continue
			}
			if !reloaded {
				reloaded = true
				if err := rl.reload(); err != nil {
					rl.failed = true
					return 0, err
				}
			}
			if rl.addresses(r.m, off, end) {
				rl.mapped = true
				continue
			}
			if rl.unmapped == nil {
				rl.unmapped = map[*model]bool{}
			}
			rl.unmapped[r.m] = true
		}
	}
	var advised int64
	for iov := rl.iov; len(iov) > 0; {
		k := min(len(iov), iovMax)
		n, _, errno := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(rl.pidfd), uintptr(unsafe.Pointer(&iov[0])), uintptr(k), unix.MADV_COLD, 0, 0)
		if errno != 0 {
			if errno == unix.ESRCH {
				// The command exited; what is left was to be freed anyway.
				return advised, nil
			}
			rl.failed = true
			return advised, fmt.Errorf("process_madvise(MADV_COLD): %w", errno)
		}
		advised += int64(n)
		iov = iov[k:]
	}
	return advised, nil
}

// na says why a run with release released nothing ("" where it did, or
// where an error says why).
func (rl *releaser) na() string {
	if rl.failed || rl.mapped {
		return ""
	}
	if len(rl.unmapped) > 0 {
		return "the command maps no model file it was asked for (loaded with --no-mmap?): its pages are in no page table to advise"
	}
	return "nothing it brought in was left to release: every page asked for was cached, or no layer's picks were followed by another's"
}
