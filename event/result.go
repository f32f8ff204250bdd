package event

// AggKey is one cell of the per-run aggregate: token × tensor × expert × op.
type AggKey struct {
	Token  uint32
	Tensor uint32
	Expert int16
	Op     uint32
}

// Agg is one aggregate row.
type Agg struct {
	AggKey
	Counters
}

// TokenInfo is the per-token summary (one llama_decode call).
type TokenInfo struct {
	Token   uint32
	Phase   uint8
	NTokens int32
	StartNS uint64 // llama_decode entry, 0 when not seen
	EndNS   uint64
	// Seqs is the set of llama.cpp sequence ids of the batch's tokens
	// (bit s for sequence s), SeqState what the set leaves out (Seq*).
	Seqs     uint64
	SeqState uint32
	// SeqTokens counts the batch's tokens per sequence, for sequences
	// below SeqCounted: what a batch of several requests is split by.
	SeqTokens [SeqCounted]uint16
	Counters
	TensorsTouched uint32 // real tensors with any event
	ExpertsTouched uint32 // (tensor, expert) pairs with any event
}

// ExpertSel counts how often the router picked an expert of a layer in a token.
type ExpertSel struct {
	Token  uint32
	Layer  uint16
	Expert uint16
	Count  uint64
}

// Result is what a run's attribution leaves besides the event stream: the
// dictionaries and aggregates the store keeps.
type Result struct {
	Tensors   []Tensor // by id
	Ops       []string // by op id; Ops[0] is ""
	Tokens    []TokenInfo
	Aggs      []Agg // sorted by token, tensor, expert, op
	Experts   []ExpertSel
	OpProbes  bool
	NotBacked []string // weights read from memory that is no file
}

// OpOf is the op of an event on tensor with probe op id op: the probe's
// when known, else the graph node's that consumes the tensor.
func (r *Result) OpOf(op, tensor uint32) uint32 {
	if op == 0 && int(tensor) < len(r.Tensors) {
		return r.Tensors[tensor].Op
	}
	return op
}

// PicksUnseenCall is one llama_decode call in which the router picks of
// some MoE layers whose experts lived on the CPU side were not all seen:
// with layers on a GPU backend, llama.cpp's scheduler hands a large
// batch's MUL_MAT_ID of CPU-resident experts to the GPU (its op offload),
// and no CPU graph then reads that layer's ids.
type PicksUnseenCall struct {
	Token  uint32 `json:"token"`
	Phase  uint8  `json:"phase"`
	Tokens int32  `json:"tokens"` // the call's batch
	// Offload says the run had weights in a GPU backend's buffer: op
	// offload is then the cause; without, the rows were not read.
	Offload bool               `json:"offload,omitempty"`
	Layers  []PicksUnseenLayer `json:"layers"`
}

// PicksUnseenLayer is a MoE layer of a PicksUnseenCall and how many of its
// rows (the call's tokens) the probe saw: fewer than the call's tokens,
// often none.
type PicksUnseenLayer struct {
	Layer uint16 `json:"layer"`
	Rows  int32  `json:"rows_seen"`
}
