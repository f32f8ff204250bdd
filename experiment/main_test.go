package experiment

import (
	"os"
	"testing"

	"github.com/iocorr/iocorr/internal/testenv"
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

// diskFile writes a file of size bytes on the real disk, left dirty.
func diskFile(t *testing.T, size int) string {
	t.Helper()
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	return testenv.DiskFile(t, b)
}
