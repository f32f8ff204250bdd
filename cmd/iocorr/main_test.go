package main

import (
	"os"
	"testing"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/testenv"
)

// record re-executes its own binary as the held child; in tests that
// binary is the test binary, which must then become the command.
func TestMain(m *testing.M) {
	launch.RunShimIfChild()
	os.Exit(m.Run())
}

// requireBPF is testenv.RequireBPF: skip only when not root and not told
// otherwise (CI sets IOCORR_REQUIRE_BPF, making it a failure).
var requireBPF = testenv.RequireBPF
