package experiment

import (
	"os"
	"path/filepath"
	"testing"
)

// The held child re-executes the test binary; this makes it the shim.
// ttyHelperEnv turns the test binary into a small `record` stand-in that
// a test runs on a pseudo-terminal of its own.
func TestMain(m *testing.M) {
	RunShimIfChild()
	switch os.Getenv(ttyHelperEnv) {
	case "":
	case "orphan":
		os.Exit(orphanHelper())
	default:
		os.Exit(ttyHelper())
	}
	os.Exit(m.Run())
}

// diskFile writes a file on the real disk (not tmpfs: eviction and FIEMAP
// need a block device underneath). The file is left dirty.
func diskFile(t *testing.T, size int) string {
	t.Helper()
	dir, err := os.MkdirTemp(".", ".exp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "f")
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
