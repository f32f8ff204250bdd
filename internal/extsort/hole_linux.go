package extsort

import (
	"os"

	"golang.org/x/sys/unix"
)

// punchHole gives n bytes at off back to the file system, best effort: a
// file system without holes keeps them until the file is closed.
func punchHole(f *os.File, off, n int64) {
	unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
}
