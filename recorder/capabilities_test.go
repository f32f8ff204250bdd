package recorder

import (
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
)

func TestMissingCapabilitiesNamesEachAbsentProbePointAndWhatIsLost(t *testing.T) {
	lib, cpu := "/b/libllama.so", "/b/libggml-cpu.so"
	searched := []string{"/b/llama-cli", lib, cpu}
	decode := bpf.Probe{Kind: "uprobe", Target: lib, Symbol: bpf.SymDecode}
	graph := bpf.Probe{Kind: "uprobe", Target: cpu, Symbol: bpf.SymGraphCompute}
	rows := bpf.Probe{Kind: "uprobe", Target: cpu, Symbol: bpf.SymGetRows}
	ops := bpf.Probe{Kind: "uprobe_multi", Target: cpu, Symbol: "ggml_compute_forward_* (118 functions)"}
	tests := []struct {
		name     string
		probes   []bpf.Probe
		probeOps bool
		moe      bool
		want     []string // the symbols said missing
	}{
		{"every point of an moe run with ops", []bpf.Probe{decode, graph, rows, ops}, true, true, nil},
		{"no llama.cpp at all is said elsewhere", []bpf.Probe{graph}, true, true, nil},
		{"llama_decode failed to attach", []bpf.Probe{{Kind: "uprobe", Symbol: bpf.SymDecode, Error: "EINVAL"}, graph, rows}, false, true, nil},
		{"no graph compute", []bpf.Probe{decode, rows}, false, true, []string{bpf.SymGraphCompute}},
		{"no get_rows in an moe run", []bpf.Probe{decode, graph}, false, true, []string{bpf.SymGetRows}},
		{"no get_rows in a dense run", []bpf.Probe{decode, graph}, false, false, nil},
		{"get_rows found but not attached is said by its attach error", []bpf.Probe{decode, graph, {Kind: "uprobe", Symbol: bpf.SymGetRows, Error: "EINVAL"}}, false, true, nil},
		{"ops asked, none found", []bpf.Probe{decode, graph, rows}, true, true, []string{"ggml_compute_forward_<op>"}},
		{"ops not asked", []bpf.Probe{decode, graph, rows}, false, true, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := missingCapabilities(tc.probes, searched, tc.probeOps, tc.moe)
			var syms []string
			for _, w := range got {
				sym, rest, ok := strings.Cut(w, " is in none of the files searched ("+strings.Join(searched, ", ")+"): ")
				if !ok || rest == "" {
					t.Errorf("warning %q does not name the symbol, the files searched and what is lost", w)
				}
				syms = append(syms, sym)
			}
			if !slices.Equal(syms, tc.want) {
				t.Errorf("said missing %q, want %q", syms, tc.want)
			}
		})
	}
}
