package pagecache

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Asking the kernel for a file's pages ahead of their use, as iocorr's
// prefetcher does and as doctor's measure of its cost does: one way, so
// that the cost measured is the cost of the calls the prefetcher makes.

// WillNeed asks for [off, off+n) in calls of at most chunk bytes
// (blockdev.WillNeedChunk: what the kernel reads of one call; it silently
// drops the rest). It returns the first errno, 0 when none.
func WillNeed(f *os.File, off, n, chunk int64) int {
	first := 0
	for n > 0 {
		c := min(n, chunk)
		if err := unix.Fadvise(int(f.Fd()), off, c, unix.FADV_WILLNEED); err != nil && first == 0 {
			if e, ok := err.(syscall.Errno); ok {
				first = int(e)
			} else {
				first = int(syscall.EIO)
			}
		}
		off, n = off+c, n-c
	}
	return first
}
