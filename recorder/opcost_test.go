package recorder

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/wire"
)

func decodeAt(tid uint32, begin bool, ts, beginTS, hits uint64) *wire.DecodeEvent {
	e := &wire.DecodeEvent{BeginTs: beginTS, OpHits: hits}
	e.Hdr.Tid, e.Hdr.Ts = tid, ts
	e.Hdr.Type = uint16(wire.EventTypeEV_DECODE_END)
	if begin {
		e.Hdr.Type = uint16(wire.EventTypeEV_DECODE_BEGIN)
	}
	return e
}

func costs(emulated, stepped time.Duration) func(bpf.FirstInstruction) (bpf.UprobeCost, error) {
	return func(f bpf.FirstInstruction) (bpf.UprobeCost, error) {
		return bpf.UprobeCost{PerHit: map[bpf.FirstInstruction]time.Duration{bpf.Emulated: emulated, bpf.Stepped: stepped}[f]}, nil
	}
}

func TestOpCostsSumEachDecodeCallsHitsAndTimeIntoTheCostPerToken(t *testing.T) {
	c := newOpCosts(costs(1000*time.Nanosecond, 3000*time.Nanosecond))
	// Two calls on two threads, interleaved: 100 hits in 1 ms, 300 in 2 ms.
	c.onDecode(decodeAt(1, true, 0, 0, 50))
	c.onDecode(decodeAt(2, true, 0, 0, 1000))
	c.onDecode(decodeAt(1, false, 1_000_001, 1, 150))
	c.onDecode(decodeAt(2, false, 2_000_001, 1, 1300))
	// An end without its begin is no call.
	c.onDecode(decodeAt(3, false, 5, 1, 10))
	// One emulated and three stepped functions: 2.5 µs a hit.
	op := c.summary([]string{"libggml-cpu.so"}, nil, nil, nil, [2]int{bpf.Emulated: 1, bpf.Stepped: 3})
	if op.Tokens != 2 || op.HitsPerTokenMax != 300 || op.HitsPerTokenMean != 200 || op.TokenNSMean != 1.5e6 {
		t.Errorf("tokens %d, hits max %d mean %g, ns mean %g; want 2, 300, 200, 1.5e6", op.Tokens, op.HitsPerTokenMax, op.HitsPerTokenMean, op.TokenNSMean)
	}
	if op.PerHitNS != 2500 || op.CalibrationNA != "" {
		t.Errorf("per hit %d ns (%q), want 2500", op.PerHitNS, op.CalibrationNA)
	}
	// 400 hits × 2.5 µs over 3 ms of calls.
	if want := 400 * 2500.0 / 3e6; math.Abs(op.OverheadRatio-want) > 1e-9 {
		t.Errorf("overhead %g, want %g", op.OverheadRatio, want)
	}
	if want := 400 * 300.0 / 3e6; math.Abs(op.BareMetalOverheadRatio[0]-want) > 1e-9 {
		t.Errorf("bare-metal overhead %v, want %g from 0.3 µs", op.BareMetalOverheadRatio, want)
	}
}

func TestOpCostsSayWhyTheCostOfAHitIsNA(t *testing.T) {
	failed := newOpCosts(func(bpf.FirstInstruction) (bpf.UprobeCost, error) { return bpf.UprobeCost{}, errors.New("no perf") })
	if op := failed.summary(nil, nil, nil, nil, [2]int{1, 1}); op.CalibrationNA != "the cost of a uprobe hit could not be measured: no perf" || op.PerHitNS != 0 {
		t.Errorf("calibration failed: %q, %d ns", op.CalibrationNA, op.PerHitNS)
	}
	unread := newOpCosts(costs(time.Microsecond, time.Microsecond))
	if op := unread.summary(nil, nil, nil, nil, [2]int{}); op.CalibrationNA == "" || op.PerHitNS != 0 {
		t.Errorf("no first instruction read: %q, %d ns", op.CalibrationNA, op.PerHitNS)
	}
}

func TestOpCostsNameOpsWithoutAFunctionAndOpsFusedAway(t *testing.T) {
	names := []string{"NONE", "MUL_MAT", "ADD", "GET_ROWS"}
	funcs := []string{"ggml_compute_forward_mul_mat", "ggml_compute_forward_get_rows"}
	c := newOpCosts(costs(time.Microsecond, time.Microsecond))
	for node, op := range map[uint64]uint32{1: 0, 2: 1, 3: 1, 4: 2, 5: 3} {
		c.onNode(&wire.NodeEvent{Node: node, Op: op})
	}
	c.onOp(&wire.OpEvent{Node: 2})
	c.onOp(&wire.OpEvent{Node: 5})
	c.onDecode(decodeAt(1, true, 0, 0, 0))
	c.onDecode(decodeAt(1, false, 10, 1, 2))
	op := c.summary(nil, nil, names, funcs, [2]int{1, 0})
	// ADD has no function in this build; node 3's MUL_MAT ran inside a
	// neighbour; NONE computes nothing.
	if len(op.Unprobed) != 1 || op.Unprobed["ADD"] != 1 || len(op.Fused) != 1 || op.Fused["MUL_MAT"] != 1 {
		t.Errorf("unprobed %v, fused %v; want ADD once, MUL_MAT once", op.Unprobed, op.Fused)
	}
	// The dispatcher runs for every node: nothing lacks a probe point.
	op = c.summary(nil, nil, names, append(funcs, "ggml_compute_forward"), [2]int{1, 0})
	if op.Unprobed != nil {
		t.Errorf("with the dispatcher probed: unprobed %v", op.Unprobed)
	}
}
