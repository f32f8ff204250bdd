package pagecache

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Asking the kernel for a file's pages ahead of their use, as iocorr's
// prefetcher does and as doctor's measure of its cost does: one way, so
// that the cost measured is the cost of the calls the prefetcher makes.

// WillNeed asks for [off, off+n) in calls of at most chunk bytes: the
// kernel reads at most the device's read-ahead size of one WILLNEED (or
// readahead(2)) call and silently drops the rest. It returns the first
// errno, 0 when none.
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

// defaultChunk is the WILLNEED call's size where the device's read-ahead
// is unknown: Linux's default read_ahead_kb.
const defaultChunk = 128 << 10

// WillNeedChunk is the most one WILLNEED call on f reads: the larger of its
// device's read-ahead and largest request (force_page_cache_ra reads up
// to max(io_pages, ra_pages), mm/readahead.c). At a read-ahead of 128 KiB
// on the lab's disk (max_sectors_kb 4096) one call read 4 MiB, not 128
// KiB: asking in read-ahead-sized calls made 32 times the calls and
// requests of 128 KiB.
func WillNeedChunk(f *os.File) int64 {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return defaultChunk
	}
	base := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	// A partition has no queue of its own: its disk's is one up.
	for _, q := range []string{base + "/queue", base + "/../queue"} {
		if c, ok := queueChunk(q); ok {
			return c
		}
	}
	return defaultChunk
}

// queueChunk is the larger of a block queue's read_ahead_kb and
// max_sectors_kb, in bytes; ok is false where the queue has no read-ahead.
func queueChunk(queue string) (int64, bool) {
	kb := func(name string) int64 {
		b, err := os.ReadFile(filepath.Join(queue, name))
		if err != nil {
			return 0
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return 0
		}
		return v
	}
	ra := kb("read_ahead_kb")
	if ra < 4 {
		return 0, false
	}
	return max(ra, kb("max_sectors_kb")) << 10, true
}
