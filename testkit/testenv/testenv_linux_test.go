package testenv

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestCapabilitiesAgreeWithProcStatus(t *testing.T) {
	caps, err := effectiveCaps()
	if err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			if want, err = strconv.ParseUint(strings.TrimSpace(v), 16, 64); err != nil {
				t.Fatalf("CapEff %q: %v", v, err)
			}
		}
	}
	if caps != want {
		t.Errorf("capget says %#x, /proc/self/status says %#x", caps, want)
	}
}
