package doctor

import (
	"os"
	"testing"
)

// TestMain lets the test binary be the prefetch cost's probe, which
// MeasurePrefetchCost re-executes.
func TestMain(m *testing.M) {
	RunCostProbeIfChild()
	os.Exit(m.Run())
}
