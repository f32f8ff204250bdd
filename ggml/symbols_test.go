package ggml

import (
	"slices"
	"testing"
)

// A library as llama.cpp builds define the probe points: llama_decode and
// ggml_graph_compute exported, get_rows static (kept in .symtab only, as
// a build that keeps .symtab has it), op functions exported or static,
// and the op name table.
const probedGGML = `
static const char *GGML_OP_NAME[2] = { "NONE", "ADD" };
int llama_decode(void *ctx, int batch) { return batch + (ctx != 0); }
int ggml_graph_compute(void *g, void *plan) { return (g != 0) + (plan != 0); }
__attribute__((used)) static void ggml_compute_forward_get_rows(void *p, void *t) { (void)p; (void)t; }
void ggml_compute_forward_add(void *p, void *t) { (void)p; (void)t; }
void ggml_compute_forward_mul(void *p, void *t) { (void)p; (void)t; }
__attribute__((used)) static void ggml_compute_forward_dup(void *p, void *t) { (void)p; (void)t; }
const char *op_name(int i) { return GGML_OP_NAME[i]; }
`

func TestFileSymbolsFindsProbePointsInAnyBindingAndOnlyExportedOps(t *testing.T) {
	so := buildSharedObject(t, probedGGML, false)
	probe, ops, hasOpNames, err := FileSymbols(so)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{SymGetRows, SymGraphCompute, SymDecode}; !slices.Equal(probe, want) {
		t.Errorf("probe symbols %q, want %q", probe, want)
	}
	if want := []string{"ggml_compute_forward_add", "ggml_compute_forward_mul"}; !slices.Equal(ops, want) {
		t.Errorf("op probe points %q, want %q (the static dup is not probed)", ops, want)
	}
	if !hasOpNames {
		t.Error("the op name table was not found")
	}
}

func TestFileSymbolsTakesTheDispatcherAloneWhereTheBuildHasIt(t *testing.T) {
	so := buildSharedObject(t, probedGGML+`
__attribute__((used)) static void ggml_compute_forward(void *p, void *t) { (void)p; (void)t; }
`, false)
	_, ops, _, err := FileSymbols(so)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{SymDispatch}; !slices.Equal(ops, want) {
		t.Errorf("op probe points %q, want %q", ops, want)
	}
}

func TestProbePointsSaysHowEachIsBound(t *testing.T) {
	so := buildSharedObject(t, probedGGML, false)
	points, globalOps, localOps, err := ProbePoints(so)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range points {
		got[p.Symbol] = p.Binding
	}
	want := map[string]string{SymDecode: "global", SymGraphCompute: "global", SymGetRows: "local"}
	if len(got) != len(want) {
		t.Errorf("probe points %v, want %v", got, want)
	}
	for s, b := range want {
		if got[s] != b {
			t.Errorf("%s bound %q, want %q", s, got[s], b)
		}
	}
	if globalOps != 2 || localOps != 1 {
		t.Errorf("%d global and %d local op functions, want 2 and 1 (get_rows is no op probe point)", globalOps, localOps)
	}
}
