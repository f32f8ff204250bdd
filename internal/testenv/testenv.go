// Package testenv holds what tests of several packages need to know about
// the machine they run on.
package testenv

import (
	"os"
	"testing"
)

// RequireBPF skips only when BPF cannot be expected to load: not root and
// not told otherwise (CI sets IOCORR_REQUIRE_BPF, making it a failure).
func RequireBPF(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("IOCORR_REQUIRE_BPF") == "" {
		t.Skip("recording needs root; set IOCORR_REQUIRE_BPF=1 to make this a failure")
	}
}
