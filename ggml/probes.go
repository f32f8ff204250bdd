package ggml

import (
	"fmt"
	"strings"
)

// Symbols the user-space probes attach to. llama_decode is in libllama;
// the rest in the libggml-cpu variant the backend loader dlopen()s.
const (
	SymDecode       = "llama_decode"
	SymGraphCompute = "ggml_graph_compute"
	SymGetRows      = "ggml_compute_forward_get_rows"
	// SymTensorSet and SymBufferName (libggml-base) tell where each weight
	// lives: the backend buffer llama.cpp copies a weight into while
	// loading, and each buffer's name ("CPU_Mapped", "Vulkan0", "CUDA0").
	SymTensorSet  = "ggml_backend_tensor_set"
	SymBufferName = "ggml_backend_buffer_name"
	// OpPrefix begins the name of every op function
	// (ggml_compute_forward_<op>), get_rows among them.
	OpPrefix = "ggml_compute_forward_"
	// SymDispatch is ggml's op dispatcher, ggml_compute_forward(params,
	// tensor): static, so only in .symtab, and only in builds that did not
	// inline it (node-llama-cpp 3.3.0 and 3.6.0: llama.cpp b4234, b4753). It takes
	// the same arguments as the op functions and runs for every node,
	// where the op functions of a build are partly inlined (mul_mat and
	// mul_mat_id in node-llama-cpp's prebuilt libraries): one probe on it
	// sees every op.
	SymDispatch = "ggml_compute_forward"
	// SymOpNames is ggml's op name table in libggml-base (OpNamesFromELF).
	SymOpNames = "GGML_OP_NAME"
)

// OpFunctions names the op probe points (one per ggml op function, or
// the dispatcher SymDispatch where the build has it).
const OpFunctions = "ggml_compute_forward_<op>"

// Need says which runs lose something when a probe point is absent.
type Need int

const (
	EveryRun Need = iota // every run of llama.cpp
	MoERun               // a run of a mixture-of-experts model
	OpsRun               // a run with --probe ops
)

// Point is a probe point of the target and what a run cannot record
// without it.
type Point struct {
	Symbol string // a function, or OpFunctions
	Need   Need
	// Lost is said by the record summary, meta.json and iocorr doctor
	// alike, in these words.
	Lost string
}

// Points is the one table of probe points: the recorder's warnings, the
// run metadata and iocorr doctor all read it.
var Points = []Point{
	{SymDecode, EveryRun, "no llama.cpp calls are recorded: no tokens, phases or per-token figures, kernel events only"},
	{SymGraphCompute, EveryRun, "graphs and their nodes (weights read per op, layers) are not recorded"},
	{SymGetRows, MoERun, "the router's expert picks are not recorded, so which experts were selected is unknown (NA), not zero"},
	{SymTensorSet, EveryRun, "weights copied into a backend's buffer while loading (a GPU's) are not recorded: their device is NA"},
	{SymBufferName, EveryRun, "backend buffers are not named: every weight's device is NA"},
	{OpFunctions, OpsRun, "--probe ops recorded no op"},
}

// ProbeSymbols are the probe points that are one function each, the
// symbols a file must define for the loader to probe it (doctor reports
// them).
var ProbeSymbols = func() []string {
	var syms []string
	for _, p := range Points {
		if p.Symbol != OpFunctions {
			syms = append(syms, p.Symbol)
		}
	}
	return syms
}()

// LostWithout says what a run cannot record without probe point sym
// (ProbeSymbols, or OpFunctions).
func LostWithout(sym string) string {
	for _, p := range Points {
		if p.Symbol == sym {
			return p.Lost
		}
	}
	return "unknown probe point"
}

// IsOpProbe says whether a probe's symbol is an op probe point: one op
// function, the one uprobe_multi over them (named OpPrefix+"* (n
// functions)"), or the dispatcher. get_rows is a probe point of its own.
func IsOpProbe(sym string) bool {
	return strings.HasPrefix(sym, OpPrefix) && sym != SymGetRows || sym == SymDispatch
}

// OpFunction is the function that computes op (a GGML_OP_NAME entry).
func OpFunction(op string) string { return OpPrefix + strings.ToLower(op) }

// emptyOps are the ops ggml computes nothing for (ggml_op_is_empty).
var emptyOps = map[string]bool{"NONE": true, "RESHAPE": true, "VIEW": true, "PERMUTE": true, "TRANSPOSE": true}

// IsEmptyOp says whether no function runs for a node of op (named as in
// GGML_OP_NAME), probed or not.
func IsEmptyOp(op string) bool { return emptyOps[op] }

// Attempt is a probe a run tried on a probe point: its symbol as the
// loader records it, and whether it attached.
type Attempt struct {
	Symbol   string
	Attached bool
}

// Missing says, one sentence each, what a run that found llama.cpp could
// not record because the probe point behind it was in none of the files
// searched — a build that inlined, renamed or stripped the function. A
// point found but not attached is not repeated here: its attach error is
// a warning of its own. Without this, a missing point would show as
// zeros (no graphs, no expert picks, no ops) that look like measurements.
func Missing(probes []Attempt, searched []string, probeOps, moe bool) []string {
	attached, found := map[string]bool{}, map[string]bool{}
	for _, p := range probes {
		sym := p.Symbol
		if IsOpProbe(sym) {
			sym = OpFunctions
		}
		found[sym] = true
		attached[sym] = attached[sym] || p.Attached
	}
	if !attached[SymDecode] {
		return nil // no llama.cpp at all: said once, elsewhere
	}
	where := strings.Join(searched, ", ")
	var out []string
	for _, p := range Points {
		lost := !found[p.Symbol] && p.Symbol != SymDecode &&
			(p.Need == EveryRun || p.Need == MoERun && moe || p.Need == OpsRun && probeOps)
		if lost {
			out = append(out, fmt.Sprintf("%s is in none of the files searched (%s): %s", p.Symbol, where, p.Lost))
		}
	}
	return out
}
