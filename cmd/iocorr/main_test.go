package main

import (
	"os"
	"testing"

	"github.com/iocorr/iocorr/experiment"
)

// record re-executes its own binary as the held child; in tests that
// binary is the test binary, which must then become the command.
func TestMain(m *testing.M) {
	experiment.RunShimIfChild()
	os.Exit(m.Run())
}

// requireBPF skips only when BPF cannot be expected to load: not root and
// not told otherwise (CI sets IOCORR_REQUIRE_BPF, making it a failure).
func requireBPF(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("IOCORR_REQUIRE_BPF") == "" {
		t.Skip("recording needs root; set IOCORR_REQUIRE_BPF=1 to make this a failure")
	}
}
