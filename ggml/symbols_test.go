package ggml

import (
	"os/exec"
	"regexp"
	"runtime"
	"slices"
	"strconv"
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
	syms, err := FileSymbols(so)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{SymGetRows, SymGraphCompute, SymDecode}; !slices.Equal(syms.Probe, want) {
		t.Errorf("probe symbols %q, want %q", syms.Probe, want)
	}
	if want := []string{"ggml_compute_forward_add", "ggml_compute_forward_mul"}; !slices.Equal(syms.Ops, want) {
		t.Errorf("op probe points %q, want %q (the static dup is not probed)", syms.Ops, want)
	}
	if !syms.HasOpNames {
		t.Error("the op name table was not found")
	}
}

func TestFileSymbolsTakesTheDispatcherAloneWhereTheBuildHasIt(t *testing.T) {
	so := buildSharedObject(t, probedGGML+`
__attribute__((used)) static void ggml_compute_forward(void *p, void *t) { (void)p; (void)t; }
`, false)
	syms, err := FileSymbols(so)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{SymDispatch}; !slices.Equal(syms.Ops, want) {
		t.Errorf("op probe points %q, want %q", syms.Ops, want)
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

// The offsets given to the attach are where binutils says each function
// lies in the file (objdump -F), past the endbr64 a CET build opens it
// with: a wrong one would put the breakpoint in the middle of some other
// code.
func TestFileSymbolsGivesEachFunctionsOffsetInTheFileAsObjdumpDoes(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		t.Fatalf("objdump (binutils, with gcc) is needed: %v", err)
	}
	dispatcher := probedGGML + `
__attribute__((used)) static void ggml_compute_forward(void *p, void *t) { (void)p; (void)t; }
`
	for _, c := range []struct {
		name, src string
		flags     []string
		pad       int // bytes of endbr64 the probes skip
	}{
		{"op functions", probedGGML, []string{"-fcf-protection=none"}, 0},
		{"the dispatcher", dispatcher, []string{"-fcf-protection=none"}, 0},
		// Linked to load at 4 MiB: no address is its file offset.
		{"code linked away from its file offset", probedGGML, []string{"-fcf-protection=none", "-Wl,-Ttext-segment=0x400000"}, 0},
		{"a CET build", probedGGML, []string{"-fcf-protection=full"}, 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.pad > 0 && runtime.GOARCH != "amd64" {
				t.Skip("endbr64 is x86-64's")
			}
			so := buildSharedObject(t, c.src, false, c.flags...)
			syms, err := FileSymbols(so)
			if err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(objdump, "-d", "-F", so).Output()
			if err != nil {
				t.Fatal(err)
			}
			// 0000000000001119 <llama_decode> (File Offset: 0x1119):
			//     1119:	f3 0f 1e fa          	endbr64
			re := regexp.MustCompile(`(?m)^[0-9a-f]+ <([^>]+)> \(File Offset: 0x([0-9a-f]+)\):\n.*\t(\S+)`)
			want, first := map[string]uint64{}, map[string]string{}
			for _, m := range re.FindAllStringSubmatch(string(out), -1) {
				off, _ := strconv.ParseUint(m[2], 16, 64)
				want[m[1]], first[m[1]] = off, m[3]
			}
			names := append(slices.Clone(syms.Probe), syms.Ops...)
			if len(syms.Offset) != len(names) {
				t.Errorf("offsets of %d functions, want one for each of %q", len(syms.Offset), names)
			}
			for _, n := range names {
				if c.pad > 0 && first[n] != "endbr64" {
					t.Errorf("%s begins with %q in a CET build, objdump says", n, first[n])
				}
				got, ok := syms.Offset[n]
				if w, found := want[n]; !ok || !found || got != w+uint64(c.pad) || syms.Pad[n] != c.pad {
					t.Errorf("%s: offset %#x (given %v) past a pad of %d, objdump says %#x (found %v) and a pad of %d", n, got, ok, syms.Pad[n], w, found, c.pad)
				}
			}
		})
	}
}
