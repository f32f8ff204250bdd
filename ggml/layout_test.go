package ggml

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A library built with debug info whose ggml structs are laid out
// differently from the built-in table: the layout must come from DWARF.
const shiftedGGML = `
#include <stdint.h>
#include <stddef.h>
struct ggml_tensor {
	int type;
	char extra_field[24];        /* moves everything after it */
	void *buffer;
	int64_t ne[4];
	size_t nb[4];
	int op;
	int32_t op_params[16];
	int32_t flags;
	struct ggml_tensor *src[10];
	struct ggml_tensor *view_src;
	size_t view_offs;
	void *data;
	char name[64];
	void *extra;
};
struct ggml_cgraph {
	int size;
	int n_nodes;
	int n_leafs;
	struct ggml_tensor **nodes;
};
int ggml_graph_compute(struct ggml_cgraph *g, void *plan) { return g->n_nodes + (plan != NULL); }
size_t probe_me(struct ggml_tensor *t) { return t->ne[0]; }
`

func buildSharedObject(t *testing.T, src string, debug bool, flags ...string) string {
	t.Helper()
	cc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed to build the test library: %v", err)
	}
	dir := t.TempDir()
	c := filepath.Join(dir, "lib.c")
	so := filepath.Join(dir, "libggml-test.so")
	if err := os.WriteFile(c, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-shared", "-fPIC", "-O0", "-o", so, c}, flags...)
	if debug {
		args = append([]string{"-g"}, args...)
	}
	if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return so
}

func TestLayoutFromDWARFReadsTheLibrarysOwnOffsets(t *testing.T) {
	so := buildSharedObject(t, shiftedGGML, true)
	got, err := LayoutFromDWARF(so)
	if err != nil {
		t.Fatal(err)
	}
	want := Layout{
		Source: "dwarf:" + so, TensorType: 0, TensorNE: 40, TensorNB: 72, TensorOp: 104,
		TensorSrc: 176, TensorViewSrc: 256, TensorData: 272, TensorName: 280,
		GraphNNodes: 4, GraphNodes: 16, TypeI32: BuiltinLayout.TypeI32, TensorBuffer: 32,
	}
	if got != want {
		t.Fatalf("layout\n got %+v\nwant %+v", got, want)
	}
}

func TestLayoutFromDWARFSaysSoWhenThereIsNone(t *testing.T) {
	so := buildSharedObject(t, shiftedGGML, false)
	if _, err := LayoutFromDWARF(so); !errors.Is(err, ErrNoDWARF) {
		t.Fatalf("err = %v, want ErrNoDWARF", err)
	}
}

func TestOpNamesFromELFRejectsALibraryWithoutTheTable(t *testing.T) {
	so := buildSharedObject(t, shiftedGGML, false)
	_, err := OpNamesFromELF(so)
	if err == nil || !strings.Contains(err.Error(), "GGML_OP_NAME") {
		t.Fatalf("err = %v, want a missing GGML_OP_NAME error", err)
	}
	syms, err := FileSymbols(so)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := syms.OpNames(so); err == nil || !strings.Contains(err.Error(), "GGML_OP_NAME") {
		t.Fatalf("FileSymbols' OpNames: err = %v, want a missing GGML_OP_NAME error", err)
	}
}

func TestOpNamesFromELFFollowsRelocations(t *testing.T) {
	// The same shape as ggml's table: a static array of string pointers,
	// relocated at load time in a position-independent library.
	so := buildSharedObject(t, `
static const char *GGML_OP_NAME[4] = { "NONE", "DUP", "ADD", "MUL_MAT" };
const char *name_of(int i) { return GGML_OP_NAME[i]; }
`, false)
	got, err := OpNamesFromELF(so)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "NONE,DUP,ADD,MUL_MAT" {
		t.Fatalf("op names = %q", got)
	}
	// The attach reads the table from the symbol FileSymbols found.
	syms, err := FileSymbols(so)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := syms.OpNames(so); err != nil || !slices.Equal(again, got) {
		t.Fatalf("FileSymbols' OpNames = %q, %v; want %q", again, err, got)
	}
}
