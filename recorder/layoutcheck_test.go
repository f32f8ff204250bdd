package recorder

import (
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestWrongLayoutDisablesWhatItReadsAndSaysWhy records real llama.cpp on
// an MoE model with ggml struct layouts that are wrong for it, as a build
// whose struct ggml_tensor moved would have them. The layout fails
// validation against the model at the first graph; the run then detaches
// the probes that read with it, says so in its warnings and in meta.json,
// and attribution takes none of the graph nodes, ops and expert picks read
// before — while tokens and page faults are recorded as ever. The right
// layout (the control) validates and keeps them.
func TestWrongLayoutDisablesWhatItReadsAndSaysWhy(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	// ggml's layout since 2024 (see ggml.BuiltinLayout and LAB-NOTES).
	right := ggml.Layout{Source: "test: right", TensorType: 0, TensorNE: 16, TensorNB: 48, TensorOp: 80, TensorSrc: 152,
		TensorViewSrc: 232, TensorData: 248, TensorName: 256, GraphNNodes: 4, GraphNodes: 16, TypeI32: 26}
	tests := []struct {
		name    string
		change  func(l *ggml.Layout)
		wantErr string // in the warning and meta.json's layout.invalid; "" for the right layout
	}{
		{"the right layout validates", func(*ggml.Layout) {}, ""},
		// Names read 8 bytes in are printable and terminated, yet no
		// tensor of the model.
		{"name 8 bytes off", func(l *ggml.Layout) { l.TensorName += 8 }, "is no tensor of the traced models"},
		// ne read from ne[1..3], nb[0]: sane numbers, not the GGUF's.
		{"ne one field off", func(l *ggml.Layout) { l.TensorNE += 8 }, "the GGUF says"},
		// The graph's nodes read from its grads array (NULL here).
		{"graph nodes at grads", func(l *ggml.Layout) { l.GraphNodes += 8 }, "none of their nodes could be read"},
	}
	spec := gguf.SynthSpec{Layers: 2, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType}
	model := llmtest.Model(t, spec)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			lay := right
			lay.Source = "test: " + tc.name
			tc.change(&lay)
			defer func(f func(bpf.Options) (*bpf.Tracer, error)) { openTracer = f }(openTracer)
			openTracer = func(o bpf.Options) (*bpf.Tracer, error) {
				o.Layout = &lay
				return bpf.Open(o)
			}
			dir := filepath.Join(t.TempDir(), "run")
			cmd := llmtest.Command(t.Context(), model, llmtest.Generation{Tokens: 4, Threads: 2, JSON: true})
			o := options(dir, cmd.Args...)
			var stderr bytes.Buffer
			o.Stdout, o.Stderr = io.Discard, &stderr
			o.Probes.Ops, o.Models = true, []string{model}
			res, err := Run(t.Context(), o)
			if err != nil {
				t.Fatal(err)
			}
			m := res.Meta
			if !m.Finished || m.Child.ExitCode != 0 {
				t.Fatalf("run finished %v, child %+v\n%s", m.Finished, m.Child, stderr.String())
			}
			if m.Layout == nil {
				t.Fatal("meta.json has no layout")
			}
			warned := strings.Contains(stderr.String(), "failed validation against the target")
			if tc.wantErr == "" {
				if m.Layout.Invalid != "" || warned || !strings.HasSuffix(m.Layout.Source, "(validated)") {
					t.Fatalf("the right layout: source %q, invalid %q\n%s", m.Layout.Source, m.Layout.Invalid, stderr.String())
				}
			} else {
				if !strings.Contains(m.Layout.Invalid, tc.wantErr) || strings.Contains(m.Layout.Source, "validated") {
					t.Errorf("meta.json layout: source %q, invalid %q; want invalid saying %q", m.Layout.Source, m.Layout.Invalid, tc.wantErr)
				}
				if !warned || !strings.Contains(stderr.String(), "expert picks") {
					t.Errorf("no warning says the layout failed and what is lost:\n%s", stderr.String())
				}
			}

			c, err := correlate.NewRun(dir, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.AddSpool(t.Context(), filepath.Join(dir, rundir.SpoolFile)); err != nil {
				t.Fatal(err)
			}
			got, err := c.Finish()
			if err != nil {
				t.Fatal(err)
			}
			var faults uint64
			for _, a := range got.Aggs {
				faults += a.Counters.Faults
			}
			ops := 0
			for _, tn := range got.Tensors {
				if tn.Op != 0 {
					ops++
				}
			}
			t.Logf("%s: %d tokens, %d faults, %d expert picks, %d tensors with an op; invalid: %q",
				tc.name, len(got.Tokens), faults, len(got.Experts), ops, m.Layout.Invalid)
			if len(got.Tokens) < 4 || faults == 0 {
				t.Errorf("%d tokens and %d faults recorded: a wrong layout must not cost the rest", len(got.Tokens), faults)
			}
			if tc.wantErr == "" && (len(got.Experts) == 0 || ops == 0) {
				t.Errorf("the right layout: %d expert picks, %d tensors with an op", len(got.Experts), ops)
			}
			if tc.wantErr != "" && (len(got.Experts) != 0 || ops != 0) {
				t.Errorf("a wrong layout: %d expert picks and %d tensors with an op attributed from data it read", len(got.Experts), ops)
			}
		})
	}
}

// cNode is a graph node of the given names as the probes send them, with
// a sane shape; bad makes its name unterminated, as a wrong layout reads it.
func cNode(node, weight string, bad bool) ggml.Node {
	n := ggml.Node{Name: make([]int8, 16), WeightName: make([]int8, 32), WeightNe: [4]uint64{1, 1, 1, 1}}
	for i := range min(len(node), 15) {
		n.Name[i] = int8(node[i])
	}
	for i := range min(len(weight), 31) {
		n.WeightName[i] = int8(weight[i])
	}
	if bad {
		for i := range n.Name {
			n.Name[i] = 'x'
		}
	}
	return n
}

// TestLayoutCheckJudgesTheLayoutByMostNodesNotOne feeds graphs of nodes,
// some failing, and holds the verdict to the rule: a node that fails
// under a layout that holds is counted and named once; most nodes of a
// graph (or of the run) failing, past the quorum, condemns the layout.
func TestLayoutCheckJudgesTheLayoutByMostNodesNotOne(t *testing.T) {
	type graph struct {
		id        uint64
		good, bad int
	}
	tests := []struct {
		name       string
		graphs     []graph
		wantErr    string // "" for a layout that holds
		wantFailed int    // nodes counted as failed
		wantNamed  int    // distinct failing nodes named
	}{
		{"every node valid", []graph{{1, 20, 0}, {2, 20, 0}}, "", 0, 0},
		{"one odd node in each graph is counted, named once", []graph{{1, 20, 1}, {2, 20, 1}, {1, 20, 1}}, "", 3, 1},
		{"most nodes of a graph fail", []graph{{1, 20, 0}, {2, 3, 9}}, "5 of 8 nodes of a graph failed", 5, 1},
		{"a small graph below the quorum is not judged alone", []graph{{1, 20, 0}, {2, 1, 3}}, "", 3, 1},
		{"most of the run's nodes fail across small graphs", []graph{{1, 1, 2}, {2, 1, 2}, {3, 1, 2}}, "5 of the run's 8 graph nodes failed", 5, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := newModels(func(string) {}, nil)
			var c layoutCheck
			var err error
			for _, g := range tc.graphs {
				for i := range g.good {
					if _, err = c.check(g.id, cNode(fmt.Sprintf("n%d", i), "w", false), 0, ms); err != nil {
						t.Fatalf("a valid node: %v", err)
					}
				}
				for range g.bad {
					if _, e := c.check(g.id, cNode("odd", "w", true), 0, ms); e != nil && err == nil {
						err = e
					}
				}
			}
			ok, failed, verdict := c.verdict()
			if tc.wantErr == "" {
				if err != nil || verdict != nil || !ok {
					t.Fatalf("the layout failed: %v (verdict %v, ok %v)", err, verdict, ok)
				}
			} else if err == nil || verdict == nil || ok || !strings.Contains(verdict.Error(), tc.wantErr) {
				t.Fatalf("verdict %v (ok %v), want %q", verdict, ok, tc.wantErr)
			}
			if failed.Failed != tc.wantFailed || len(failed.Nodes) != tc.wantNamed {
				t.Fatalf("failed %d, named %d; want %d, %d", failed.Failed, len(failed.Nodes), tc.wantFailed, tc.wantNamed)
			}
			if tc.wantNamed > 0 && !strings.Contains(failed.Nodes[0].Why, "not NUL-terminated") {
				t.Fatalf("a failing node named without its reason: %+v", failed.Nodes[0])
			}
		})
	}
}

// TestNodeOfComparesOnlyAModelsOwnBytes holds nodeOf to the GPU driver's
// case: a graph input whose data lies in a file-backed mapping that is no
// traced model (a device file, a memfd) is ggml data and validates; a
// weight in the model's own file is looked up in its GGUF and fails when
// the model has no such tensor.
func TestNodeOfComparesOnlyAModelsOwnBytes(t *testing.T) {
	dir := t.TempDir()
	model := ggufFile(t, dir, "m.gguf")
	other := plainFile(t, dir, "buffer")
	ms := newModels(func(string) {}, nil)
	if _, err := ms.add(model); err != nil {
		t.Fatal(err)
	}
	mdev, mino := fileID(t, model)
	odev, oino := fileID(t, other)
	ev := func(weight string, dev uint32, ino uint64) *wire.NodeEvent {
		e := &wire.NodeEvent{Dev: dev, Ino: ino, WeightNe: [4]uint64{1, 1, 1, 1}}
		copy(e.NodeName[:], []int8{'n', 0})
		for i := range len(weight) {
			e.WeightName[i] = int8(weight[i])
		}
		return e
	}
	tests := []struct {
		name    string
		e       *wire.NodeEvent
		wantErr string
	}{
		{"a graph input in another file's mapping", ev("inp_tokens", odev, oino), ""},
		{"a graph input in anonymous memory", ev("inp_tokens", 0, 0), ""},
		{"a name the model lacks, in the model's file", ev("inp_tokens", mdev, mino), "is no tensor of the traced models"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c layoutCheck
			err := ggml.ValidateNode(nodeOf(tc.e, ms), 0, c.weight(ms))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestLayoutCheckFailsALayoutUnderWhichNoNodeCouldBeRead(t *testing.T) {
	var c layoutCheck
	if c.unreadable(0, 1) != nil || c.unreadable(3, 0) != nil {
		t.Fatal("failed a layout with no graph computed, or no model traced")
	}
	err := c.unreadable(3, 1)
	if _, _, verdict := c.verdict(); err == nil || verdict != err || !strings.Contains(err.Error(), "3 graphs were computed but none of their nodes could be read") {
		t.Fatalf("unreadable: %v, verdict %v", err, verdict)
	}
	ms := newModels(func(string) {}, nil)
	var read layoutCheck
	read.check(1, cNode("a", "", false), 0, ms)
	if err := read.unreadable(3, 1); err != nil {
		t.Fatalf("a layout under which a node was read: %v", err)
	}
	// A run too short for the quorum whose every node failed.
	var short layoutCheck
	for range 3 {
		if _, err := short.check(1, cNode("a", "", true), 0, ms); err != nil {
			t.Fatalf("3 nodes judged the layout: %v", err)
		}
	}
	if err := short.unreadable(1, 1); err == nil || !strings.Contains(err.Error(), "none of the 3 graph nodes read validated") {
		t.Fatalf("a short run of failing nodes: %v", err)
	}
}
