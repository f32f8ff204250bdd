package launch

import (
	"os"
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
