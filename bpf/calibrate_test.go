package bpf

import (
	"debug/elf"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/elfinfo"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// A uprobe hit is a trap into the kernel and back: dearer than a plain
// call, and far below a millisecond on any machine this runs on (about
// 6 µs in this VM, under 1 µs on bare metal). The probe's own count
// must equal the calls, or the figure is refused.
func TestMeasureUprobeCostTimesEveryHitOfTheProbedArm(t *testing.T) {
	testenv.RequireBPF(t)
	var costs [2]UprobeCost
	for _, first := range []FirstInstruction{Emulated, Stepped} {
		c, err := MeasureUprobeCost(2000, 3, first)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("one uprobe hit on a function whose first instruction is %v: %v (rounds %v–%v), a bare call %v", first, c.PerHit, c.Min, c.Max, c.Bare)
		if c.PerHit <= c.Bare || c.PerHit > time.Millisecond || c.First != first {
			t.Errorf("one uprobe hit (%v) costs %v, a bare call %v", c.First, c.PerHit, c.Bare)
		}
		// The emulated target is a CET function on x86-64: its probe
		// goes past the endbr64, and fired every call from there.
		if wantPad := map[bool]int{true: 4}[first == Emulated && runtime.GOARCH == "amd64"]; c.Pad != wantPad {
			t.Errorf("the %v calibration probed %d bytes past the target's start, want %d", first, c.Pad, wantPad)
		}
		costs[first] = c
	}
	// Which is dearer is the kernel's: one that emulates the prologue
	// (6.18 here: 3–10× cheaper, by the host) or steps both alike.
	t.Logf("stepped ÷ emulated: %.2f", float64(costs[Stepped].PerHit)/float64(costs[Emulated].PerHit))
	if _, err := MeasureUprobeCost(0, 1, Emulated); err == nil {
		t.Error("a calibration of no calls was not refused")
	}
}

// The calibration is the cost of a hit on the first instruction C
// compilers give a function (testkit/llmtest checks that ggml's and
// llama's probed functions have it): the kernel emulates some first
// instructions and steps others out of line, at different costs.
func TestCalibrationTargetBeginsWithTheCompilersPrologue(t *testing.T) {
	machine := hostMachine()
	if machine == elf.EM_NONE {
		t.Skipf("no assembly calibration target on %s", runtime.GOARCH)
	}
	// What the uprobe is attached to: the file's bytes at the offset.
	pcTarget, pcStepped := calibrationPCs()
	self, off, err := mappedFileOffset(pcTarget)
	if err != nil {
		t.Fatal(err)
	}
	_, stepOff, err := mappedFileOffset(pcStepped)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	code, stepped := make([]byte, elfinfo.StartBytes), make([]byte, elfinfo.StartBytes)
	if _, err := f.ReadAt(code, int64(off)); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(stepped, int64(stepOff)); err != nil {
		t.Fatal(err)
	}
	if _, emulated := elfinfo.ProbePoint(machine, code); !emulated {
		t.Errorf("the calibration target begins % x, not the compilers' prologue (past a landing pad)", code)
	}
	if pad, emulated := elfinfo.ProbePoint(machine, stepped); emulated || pad != 0 {
		t.Errorf("the stepped calibration target begins % x, a landing pad or the compilers' prologue", stepped)
	}
	x := uint64(3)
	for _, f := range []func(uint64) uint64{calibrationTarget, calibrationStepped} {
		if got := f(x); got != x*0x9e3779b97f4a7c15+1 {
			t.Errorf("a calibration target of 3 = %#x", got)
		}
	}
}
