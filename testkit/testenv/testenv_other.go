//go:build !linux

package testenv

import (
	"os"
	"runtime"
	"testing"
)

// RequireBPF stops t: BPF programs load only into Linux.
func RequireBPF(t testing.TB) {
	t.Helper()
	missing(t, "tracing needs Linux's BPF, and this is "+runtime.GOOS)
}

// OpenPTY stops t: the pseudo-terminals the tests drive are Linux's
// (/dev/ptmx with TIOCGPTN).
func OpenPTY(t testing.TB) (master, slave *os.File) {
	t.Helper()
	t.Skipf("the tests' pseudo-terminals are Linux's, and this is %s", runtime.GOOS)
	return nil, nil
}
