package recorder

import (
	"slices"
	"sync"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// opCosts is what --probe ops costs the run: the calibrated cost of a
// uprobe hit, taken before the command starts, and per decode call its
// op-probe hits and wall time, counted from the ring by the drain
// goroutine; summary sums them up for meta.json's op_probes from any
// goroutine.
type opCosts struct {
	// cost is a hit's by what the kernel does with the probed
	// instruction; costErr says why it is unknown.
	cost    [2]bpf.UprobeCost
	costErr error

	mu        sync.Mutex
	hitsAt    map[uint32]uint64 // a call's hits at its entry, by thread
	nodeOps   map[uint64]uint32 // weight-reading nodes seen → their op
	opNodes   map[uint64]bool   // nodes an op event was seen for
	tokenHits []uint64
	tokenNS   []uint64
}

// newOpCosts calibrates a hit's cost, before the command starts: the
// calibration's own hits must not land in the traced command's time.
func newOpCosts(measure func(bpf.FirstInstruction) (bpf.UprobeCost, error)) *opCosts {
	c := &opCosts{hitsAt: map[uint32]uint64{}, nodeOps: map[uint64]uint32{}, opNodes: map[uint64]bool{}}
	for _, first := range []bpf.FirstInstruction{bpf.Emulated, bpf.Stepped} {
		if c.costErr == nil {
			c.cost[first], c.costErr = measure(first)
		}
	}
	return c
}

// onDecode counts a decode call's op-probe hits and wall time at its end.
func (c *opCosts) onDecode(e *wire.DecodeEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Hdr.Type == uint16(wire.EventTypeEV_DECODE_BEGIN) {
		c.hitsAt[e.Hdr.Tid] = e.OpHits
	} else if at, ok := c.hitsAt[e.Hdr.Tid]; ok && e.BeginTs != 0 && e.Hdr.Ts >= e.BeginTs {
		delete(c.hitsAt, e.Hdr.Tid)
		c.tokenHits = append(c.tokenHits, e.OpHits-at)
		c.tokenNS = append(c.tokenNS, e.Hdr.Ts-e.BeginTs)
	}
}

// onNode notes a weight-reading node and its op.
func (c *opCosts) onNode(e *wire.NodeEvent) {
	c.mu.Lock()
	c.nodeOps[e.Node] = e.Op
	c.mu.Unlock()
}

// onOp notes a node whose op function ran (and was probed).
func (c *opCosts) onOp(e *wire.OpEvent) {
	c.mu.Lock()
	c.opNodes[e.Node] = true
	c.mu.Unlock()
}

// summary sums up what the op probes on files cost per token. first counts
// the probed op functions whose first instruction the kernel emulates and
// steps (bpf.FirstInstruction), which weigh the calibrated costs.
func (c *opCosts) summary(files, idle, opNames, opFuncs []string, first [2]int) *rundir.OpProbes {
	c.mu.Lock()
	defer c.mu.Unlock()
	op := &rundir.OpProbes{Files: files, Idle: idle, Tokens: len(c.tokenHits)}
	// The dispatcher runs for every node: no op lacks a probe point.
	dispatch := slices.Contains(opFuncs, ggml.SymDispatch)
	for node, v := range c.nodeOps {
		if int(v) >= len(opNames) || ggml.IsEmptyOp(opNames[v]) {
			continue
		}
		name := opNames[v]
		switch {
		case !dispatch && !slices.Contains(opFuncs, ggml.OpFunction(name)):
			if op.Unprobed == nil {
				op.Unprobed = map[string]int{}
			}
			op.Unprobed[name]++
		case !c.opNodes[node] && len(c.tokenHits) > 0:
			if op.Fused == nil {
				op.Fused = map[string]int{}
			}
			op.Fused[name]++
		}
	}
	switch {
	case c.costErr != nil:
		op.CalibrationNA = "the cost of a uprobe hit could not be measured: " + c.costErr.Error()
	case first[bpf.Emulated]+first[bpf.Stepped] == 0:
		op.CalibrationNA = "the first instructions of the probed op functions could not be read"
	default:
		// Weighted by function: a build compiles its op functions alike,
		// so a mix is rare, and the hits per function are not known.
		emu, step := float64(first[bpf.Emulated]), float64(first[bpf.Stepped])
		op.PerHitNS = int64((emu*float64(c.cost[bpf.Emulated].PerHit) + step*float64(c.cost[bpf.Stepped].PerHit)) / (emu + step))
		op.FirstInstruction = map[string]int{bpf.Emulated.String(): first[bpf.Emulated], bpf.Stepped.String(): first[bpf.Stepped]}
	}
	var hits, ns float64
	for i, h := range c.tokenHits {
		hits += float64(h)
		ns += float64(c.tokenNS[i])
		op.HitsPerTokenMax = max(op.HitsPerTokenMax, h)
	}
	if n := float64(len(c.tokenHits)); n > 0 {
		op.HitsPerTokenMean, op.TokenNSMean = hits/n, ns/n
	}
	if ns > 0 && op.PerHitNS > 0 {
		op.OverheadRatio = hits * float64(op.PerHitNS) / ns
	}
	if ns > 0 {
		for i, c := range bpf.BareMetalUprobeCost {
			op.BareMetalOverheadRatio[i] = hits * float64(c.Nanoseconds()) / ns
		}
	}
	return op
}
