package main

import (
	"testing"

	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// record re-executes its own binary as the held child; in tests that
// binary is the test binary, which must then become the command.
func TestMain(m *testing.M) { rectest.Main(m) }

// requireBPF is testenv.RequireBPF: skip only when not root and not told
// otherwise (CI sets IOCORR_REQUIRE_BPF, making it a failure).
var requireBPF = testenv.RequireBPF
