package ggml

import (
	"slices"
	"strings"
	"testing"
)

func TestMissingNamesEachAbsentProbePointAndWhatIsLost(t *testing.T) {
	lib, cpu := "/b/libllama.so", "/b/libggml-cpu.so"
	searched := []string{"/b/llama-cli", lib, cpu}
	decode := Attempt{Symbol: SymDecode, Attached: true}
	graph := Attempt{Symbol: SymGraphCompute, Attached: true}
	rows := Attempt{Symbol: SymGetRows, Attached: true}
	ops := Attempt{Symbol: "ggml_compute_forward_* (118 functions)", Attached: true}
	set := Attempt{Symbol: SymTensorSet, Attached: true}
	name := Attempt{Symbol: SymBufferName, Attached: true}
	tests := []struct {
		name     string
		probes   []Attempt
		probeOps bool
		moe      bool
		want     []string // the symbols said missing
	}{
		{"every point of an moe run with ops", []Attempt{decode, graph, rows, ops}, true, true, nil},
		{"no llama.cpp at all is said elsewhere", []Attempt{graph}, true, true, nil},
		{"llama_decode failed to attach", []Attempt{{Symbol: SymDecode}, graph, rows}, false, true, nil},
		{"no graph compute", []Attempt{decode, rows}, false, true, []string{SymGraphCompute}},
		{"no get_rows in an moe run", []Attempt{decode, graph}, false, true, []string{SymGetRows}},
		{"no get_rows in a dense run", []Attempt{decode, graph}, false, false, nil},
		{"get_rows found but not attached is said by its attach error", []Attempt{decode, graph, {Symbol: SymGetRows}}, false, true, nil},
		{"ops asked, none found", []Attempt{decode, graph, rows}, true, true, []string{"ggml_compute_forward_<op>"}},
		{"ops through the dispatcher alone", []Attempt{decode, graph, rows, {Symbol: SymDispatch, Attached: true}}, true, true, nil},
		{"ops not asked", []Attempt{decode, graph, rows}, false, true, nil},
		{"no buffer names", []Attempt{decode, graph, rows, set, {Symbol: SymDispatch, Attached: true}}, false, true, []string{SymBufferName}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			probes := tc.probes
			if !strings.HasPrefix(tc.name, "no buffer names") {
				// Every build has both: they are asked of every case.
				probes = append(slices.Clone(probes), set, name)
			}
			got := Missing(probes, searched, tc.probeOps, tc.moe)
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
