package bpf

import "fmt"

// The bounds of the bounded loops taken where the kernel has no bpf_loop
// (ggml.bpf.h's GRAPH_WALK_BOUND and EXPERT_CHUNK_BOUND, and iocorr.h's
// IOCORR_MAX_EXPERT_IDS; TestTheLoopBoundsAreTheBPFSources checks them).
const (
	GraphWalkBound   = 1024
	ExpertChunkBound = 64
	maxExpertIDs     = 128 // IOCORR_MAX_EXPERT_IDS
)

// loops_cut's keys (common.bpf.h's enum loop_cut).
const (
	loopCutGraphNodes = 0
	loopCutExpertRows = 1
)

// LoopsCut is what the bounded loops left unread in a run: graph nodes
// never walked and token rows of expert ids past the bound. Both are zero
// on the bpf_loop path, which walks everything at once.
type LoopsCut struct {
	GraphNodes uint64
	ExpertRows uint64
}

// LoopsCut reads the counts of the kernel's bounded loops: the nodes of
// graphs whose walk never finished (graph_walks' unwalked tails, and the
// graphs the map had no room for) and the expert-id rows past the bound.
func (t *Tracer) LoopsCut() (LoopsCut, error) {
	var out LoopsCut
	for key, dst := range map[uint32]*uint64{loopCutGraphNodes: &out.GraphNodes, loopCutExpertRows: &out.ExpertRows} {
		n, err := perCPUSum(t.objs.LoopsCut, key)
		if err != nil {
			return out, fmt.Errorf("reading the bounded loops' cut counts: %w", err)
		}
		*dst = n
	}
	var (
		id uint64
		gw IocorrGraphWalk
		it = t.objs.GraphWalks.Iterate()
	)
	for it.Next(&id, &gw) {
		if gw.Next < gw.N_nodes {
			out.GraphNodes += uint64(gw.N_nodes - gw.Next)
		}
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("reading the graphs' walks: %w", err)
	}
	return out, nil
}
