//go:build unix

package elfinfo

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the size bytes of f read-only: the symbol tables are read
// where they lie, and only the pages read are loaded.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	data, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return unix.Munmap(data) }, nil
}
