// Package testenv holds what iocorr's tests need of the machine they run
// on, in one place: the privileges that tracing and the page cache need,
// and a pseudo-terminal.
//
// A test that needs a privilege skips only where it cannot be expected to
// have it: the process lacks it and IOCORR_REQUIRE_BPF is unset. CI (and
// `make test` as root) sets IOCORR_REQUIRE_BPF, and a missing privilege is
// then a failure, never a quiet skip. Tracing is Linux's: elsewhere (the
// read side's tests, compiled for macOS and Windows) a test that needs it
// is one whose privilege is missing.
package testenv

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"
)

// RequireEnv names the variable that turns a missing privilege from a skip
// into a failure.
const RequireEnv = "IOCORR_REQUIRE_BPF"

// RequireRoot stops t unless the process runs as root: evicting the page
// cache, making cgroups and switching users need it.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	missing(t, "this test needs root (page cache, cgroups, users)")
}

func missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("%s, and %s is set", why, RequireEnv)
	}
	t.Skipf("%s; set %s=1 to make this a failure", why, RequireEnv)
}

// RandomDiskFile is a DiskFile of size random bytes.
func RandomDiskFile(t testing.TB, size int) string {
	t.Helper()
	b := make([]byte, size)
	rand.Read(b)
	return DiskFile(t, b)
}

// DiskFile writes data to a new file on the disk under the test's working
// directory (its package's, on a real block device), removed when t ends.
// Not t.TempDir(): that may be a tmpfs, and eviction, FIEMAP and block
// requests need a block device under the file. The file is left dirty in
// the page cache: sync it before evicting it.
func DiskFile(t testing.TB, data []byte) string {
	t.Helper()
	dir, err := os.MkdirTemp(".", ".diskfile")
	if err != nil {
		t.Fatalf("making a directory on the disk: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "data")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatalf("writing %s: %v", p, err)
	}
	return p
}
