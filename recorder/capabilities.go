package recorder

import (
	"fmt"
	"strings"

	"github.com/iocorr/iocorr/bpf"
)

// missingCapabilities says, one sentence each, what a run that found
// llama.cpp could not record because the probe point behind it was in
// none of the files searched — a build that inlined, renamed or stripped
// the function. A point found but not attached is not repeated here: its
// attach error is a warning of its own. Without this, a missing point
// would show as zeros (no graphs, no expert picks, no ops) that look
// like measurements.
func missingCapabilities(probes []bpf.Probe, searched []string, probeOps, moe bool) []string {
	attached, found := map[string]bool{}, map[string]bool{}
	opFuncs := false
	for _, p := range probes {
		found[p.Symbol] = true
		attached[p.Symbol] = attached[p.Symbol] || p.Error == ""
		if strings.HasPrefix(p.Symbol, "ggml_compute_forward_") && p.Symbol != bpf.SymGetRows || p.Symbol == bpf.SymDispatch {
			opFuncs = true
		}
	}
	if !attached[bpf.SymDecode] {
		return nil // no llama.cpp at all: said once, elsewhere
	}
	where := strings.Join(searched, ", ")
	var out []string
	miss := func(sym, lost string) {
		out = append(out, fmt.Sprintf("%s is in none of the files searched (%s): %s", sym, where, lost))
	}
	if !found[bpf.SymGraphCompute] {
		miss(bpf.SymGraphCompute, LostWithout(bpf.SymGraphCompute))
	}
	if moe && !found[bpf.SymGetRows] {
		miss(bpf.SymGetRows, LostWithout(bpf.SymGetRows))
	}
	if probeOps && !opFuncs {
		miss(OpFunctions, LostWithout(OpFunctions))
	}
	return out
}

// OpFunctions names the op probe points (one per ggml op function, or
// the dispatcher bpf.SymDispatch where the build has it).
const OpFunctions = "ggml_compute_forward_<op>"

// LostWithout says what a run cannot record without probe point sym
// (bpf.ProbeSymbols, or OpFunctions): the record summary, meta.json and
// iocorr doctor say it in the same words.
func LostWithout(sym string) string {
	switch sym {
	case bpf.SymDecode:
		return "no llama.cpp calls are recorded: no tokens, phases or per-token figures, kernel events only"
	case bpf.SymGraphCompute:
		return "graphs and their nodes (weights read per op, layers) are not recorded"
	case bpf.SymGetRows:
		return "the router's expert picks are not recorded, so which experts were selected is unknown (NA), not zero"
	case OpFunctions:
		return "--probe ops recorded no op"
	}
	return "unknown probe point"
}
