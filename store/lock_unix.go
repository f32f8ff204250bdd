//go:build unix

package store

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive lock of f without waiting: busy when
// another process holds it.
func lockFile(f *os.File) (busy bool, err error) {
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	return false, err
}

// dropPages gives back the resident pages of a shared read-only mapping.
func dropPages(start, n uintptr) {
	syscall.Syscall(syscall.SYS_MADVISE, start, n, syscall.MADV_DONTNEED)
}
