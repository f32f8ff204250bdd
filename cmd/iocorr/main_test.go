package main

import "github.com/iocorr/iocorr/testkit/testenv"

// requireBPF is testenv.RequireBPF: skip only when not root and not told
// otherwise (CI sets IOCORR_REQUIRE_BPF, making it a failure).
var requireBPF = testenv.RequireBPF
