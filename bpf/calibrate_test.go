package bpf

import (
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/testenv"
)

// A uprobe hit is a trap into the kernel and back: dearer than a plain
// call, and far below a millisecond on any machine this runs on (about
// 20 µs in this VM, under 1 µs on bare metal). The probe's own count
// must equal the calls, or the figure is refused.
func TestMeasureUprobeCostTimesEveryHitOfTheProbedArm(t *testing.T) {
	testenv.RequireBPF(t)
	c, err := MeasureUprobeCost(2000, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("one uprobe hit: %v (rounds %v–%v), a bare call %v", c.PerHit, c.Min, c.Max, c.Bare)
	if c.PerHit <= c.Bare || c.PerHit > time.Millisecond {
		t.Errorf("one uprobe hit costs %v, a bare call %v", c.PerHit, c.Bare)
	}
	if _, err := MeasureUprobeCost(0, 1); err == nil {
		t.Error("a calibration of no calls was not refused")
	}
}
