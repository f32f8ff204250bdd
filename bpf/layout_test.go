package bpf

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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

func buildSharedObject(t *testing.T, src string, debug bool) string {
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
	args := []string{"-shared", "-fPIC", "-O0", "-o", so, c}
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
		Source: "dwarf:" + so, TensorType: 0, TensorNE: 32, TensorNB: 64, TensorOp: 96,
		TensorSrc: 168, TensorViewSrc: 248, TensorData: 264, TensorName: 272,
		GraphNNodes: 4, GraphNodes: 16, TypeI32: builtinLayout.TypeI32,
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
}

func nodeEvent(nodeName, weightName string, op uint32, typ uint32, ne [4]uint64) *IocorrNodeEvent {
	e := &IocorrNodeEvent{Op: op, WeightType: typ, WeightNe: ne}
	for i := 0; i < len(nodeName) && i < 63; i++ {
		e.NodeName[i] = int8(nodeName[i])
	}
	for i := 0; i < len(weightName) && i < 63; i++ {
		e.WeightName[i] = int8(weightName[i])
	}
	return e
}

func TestValidateNode(t *testing.T) {
	good := [4]uint64{1024, 1024, 1, 1}
	unterminated := nodeEvent("Qcur-0", "blk.0.attn_q.weight", 29, 1, good)
	for i := range unterminated.WeightName {
		unterminated.WeightName[i] = 'a'
	}
	tests := []struct {
		name    string
		e       *IocorrNodeEvent
		wantErr string
	}{
		{"a real node passes", nodeEvent("Qcur-0", "blk.0.attn_q.weight", 29, 1, good), ""},
		{"binary bytes in a name mean a wrong layout", nodeEvent("Q\x01cur", "blk.0.attn_q.weight", 29, 1, good), "node name has byte"},
		{"an unterminated name means a wrong layout", unterminated, "not NUL-terminated"},
		{"an op past the target's table", nodeEvent("x", "w", 95, 1, good), "op 95 out of range"},
		{"an absurd type", nodeEvent("x", "w", 29, 4000, good), "weight type"},
		{"a zero dimension", nodeEvent("x", "w", 29, 1, [4]uint64{1024, 0, 1, 1}), "ne[1] = 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateNode(tc.e, 95, nil)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestValidateNodeComparesAFileBackedWeightWithTheModel(t *testing.T) {
	gguf := map[string]Weight{"blk.0.attn_q.weight": {Type: 30, Ne: [4]uint64{512, 512, 1, 1}, Nb: [4]uint64{2, 1024, 524288, 524288}, FileOff: 1 << 20}}
	lookup := func(n string) (Weight, bool) { w, ok := gguf[n]; return w, ok }
	good := func() *IocorrNodeEvent {
		e := nodeEvent("Qcur-0", "blk.0.attn_q.weight", 29, 30, [4]uint64{512, 512, 1, 1})
		e.WeightNb, e.Ino, e.FileOff = [4]uint64{2, 1024, 524288, 524288}, 12, 1<<20
		return e
	}
	tests := []struct {
		name    string
		change  func(e *IocorrNodeEvent)
		wantErr string
	}{
		{"the model's own tensor passes", func(*IocorrNodeEvent) {}, ""},
		{"a weight not in a file is not compared", func(e *IocorrNodeEvent) { e.Ino, e.WeightName[0] = 0, 'x' }, ""},
		{"a name the model does not have", func(e *IocorrNodeEvent) { e.WeightName[0] = 'x' }, "no tensor of the traced models"},
		{"another type", func(e *IocorrNodeEvent) { e.WeightType = 1 }, "has type 1"},
		{"another shape", func(e *IocorrNodeEvent) { e.WeightNe[1] = 256 }, "has ne"},
		{"strides of another type", func(e *IocorrNodeEvent) { e.WeightNb[0] = 4 }, "has nb"},
		{"another offset", func(e *IocorrNodeEvent) { e.FileOff += 4096 }, "file offset"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := good()
			tc.change(e)
			err := ValidateNode(e, 95, lookup)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
