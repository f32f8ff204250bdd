package recorder

import (
	"bytes"
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
			cmd := llmtest.Command(t.Context(), model, llmtest.Options{Tokens: 4, Threads: 2, JSON: true})
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

func TestLayoutCheckSaysItsVerdictWhenItChanges(t *testing.T) {
	ms := newModels(func(string) {}, nil)
	good := ggml.Node{Name: []int8{'a', 0}, WeightName: []int8{0}, WeightNe: [4]uint64{1, 1, 1, 1}}
	bad := good
	bad.Name = []int8{'a'} // not NUL-terminated: read at a wrong offset
	var c layoutCheck
	for i, want := range []bool{true, false} {
		if changed, err := c.check(good, 0, ms); changed != want || err != nil {
			t.Fatalf("good node %d: changed %v, %v; want %v", i, changed, err, want)
		}
	}
	if ok, err := c.verdict(); !ok || err != nil {
		t.Fatalf("after good nodes: ok %v, %v", ok, err)
	}
	if changed, err := c.check(bad, 0, ms); !changed || err == nil {
		t.Fatalf("bad node: changed %v, %v", changed, err)
	}
	if ok, err := c.verdict(); ok || err == nil || !strings.Contains(err.Error(), "not NUL-terminated") {
		t.Fatalf("after a bad node: ok %v, %v", ok, err)
	}
}

func TestLayoutCheckFailsALayoutUnderWhichNoNodeCouldBeRead(t *testing.T) {
	var c layoutCheck
	if c.unreadable(0, 1) != nil || c.unreadable(3, 0) != nil {
		t.Fatal("failed a layout with no graph computed, or no model traced")
	}
	err := c.unreadable(3, 1)
	if _, verdict := c.verdict(); err == nil || verdict != err || !strings.Contains(err.Error(), "3 graphs were computed but none of their nodes could be read") {
		t.Fatalf("unreadable: %v, verdict %v", err, verdict)
	}
	var read layoutCheck
	read.check(ggml.Node{Name: []int8{0}, WeightName: []int8{0}, WeightNe: [4]uint64{1, 1, 1, 1}}, 0, newModels(func(string) {}, nil))
	if err := read.unreadable(3, 1); err != nil {
		t.Fatalf("a layout under which a node was read: %v", err)
	}
}
