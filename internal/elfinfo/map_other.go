//go:build !unix

package elfinfo

import (
	"io"
	"os"
)

// mapFile reads the size bytes of f: without mmap (Windows, where only
// the read side runs, for a recorded run's model files) the whole file is
// read.
func mapFile(f *os.File, size int64) ([]byte, func() error, error) {
	data := make([]byte, size)
	if _, err := f.ReadAt(data, 0); err != nil && err != io.EOF {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
