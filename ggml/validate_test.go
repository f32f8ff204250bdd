package ggml

import (
	"strings"
	"testing"
)

// nodeEvent is a node as the probes send it: names in 64-byte arrays
// (GGML_MAX_NAME), NUL-padded.
func nodeEvent(nodeName, weightName string, op uint32, typ uint32, ne [4]uint64) *Node {
	e := &Node{Name: make([]int8, 64), WeightName: make([]int8, 64), Op: op, WeightType: typ, WeightNe: ne}
	for i := 0; i < len(nodeName) && i < 63; i++ {
		e.Name[i] = int8(nodeName[i])
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
		e       *Node
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
			err := ValidateNode(*tc.e, 95, nil)
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
	good := func() *Node {
		e := nodeEvent("Qcur-0", "blk.0.attn_q.weight", 29, 30, [4]uint64{512, 512, 1, 1})
		e.WeightNb, e.InModel, e.FileOff = [4]uint64{2, 1024, 524288, 524288}, true, 1<<20
		return e
	}
	tests := []struct {
		name    string
		change  func(e *Node)
		wantErr string
	}{
		{"the model's own tensor passes", func(*Node) {}, ""},
		{"a weight outside the model files is not compared", func(e *Node) { e.InModel, e.WeightName[0] = false, 'x' }, ""},
		// inp_tokens in a GPU driver's host-visible buffer, mapped from
		// /dev/nvidia0 or a memfd: file-backed, yet no model's bytes.
		{"a graph input in a driver's mapping is ggml data, not a weight", func(e *Node) {
			e.InModel, e.FileOff = false, 0
			copy(e.WeightName, []int8{'i', 'n', 'p', '_', 't', 'o', 'k', 'e', 'n', 's', 0})
		}, ""},
		{"a name the model does not have", func(e *Node) { e.WeightName[0] = 'x' }, "no tensor of the traced models"},
		{"another type", func(e *Node) { e.WeightType = 1 }, "has type 1"},
		{"another shape", func(e *Node) { e.WeightNe[1] = 256 }, "has ne"},
		{"strides of another type", func(e *Node) { e.WeightNb[0] = 4 }, "has nb"},
		{"another offset", func(e *Node) { e.FileOff += 4096 }, "file offset"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := good()
			tc.change(e)
			err := ValidateNode(*e, 95, lookup)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestWeightOfGivesGGMLsStridesForTheGGUFsTypeAndShape(t *testing.T) {
	tests := []struct {
		name   string
		typ    string
		ne     []uint64
		want   Weight
		wantOK bool
	}{
		{"a matrix of F32", "F32", []uint64{512, 256}, Weight{Type: 0, Ne: [4]uint64{512, 256, 1, 1}, Nb: [4]uint64{4, 2048, 524288, 524288}, FileOff: 4096}, true},
		{"a vector of F16", "F16", []uint64{64}, Weight{Type: 1, Ne: [4]uint64{64, 1, 1, 1}, Nb: [4]uint64{2, 128, 128, 128}, FileOff: 4096}, true},
		{"an expert stack of Q8_0 (blocks of 32 in 34 bytes)", "Q8_0", []uint64{64, 32, 4}, Weight{Type: 8, Ne: [4]uint64{64, 32, 4, 1}, Nb: [4]uint64{34, 68, 2176, 8704}, FileOff: 4096}, true},
		{"a type ggml does not know", "Q9_9", []uint64{64}, Weight{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := WeightOf(tc.typ, tc.ne, 4096)
			if ok != tc.wantOK || got != tc.want {
				t.Fatalf("WeightOf = %+v, %v; want %+v, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}
