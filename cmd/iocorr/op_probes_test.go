package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/rundir"
)

// TestOpProbesGoOnlyOnTheCPUBackendThatRuns: node-llama-cpp loads every
// libggml-cpu variant and runs one. With --probe ops the op functions of
// exactly that one are probed (the one whose first graph stopped the
// process for the attach), no op of any graph is missed — every weight-
// reading node of every graph has its op — and with one compute thread
// the kernel's count of op-probe hits per token equals the op events of
// the token. meta.json carries the calibrated cost of a hit and the
// overhead estimates.
func TestOpProbesGoOnlyOnTheCPUBackendThatRuns(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 3, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType})
	dir := filepath.Join(t.TempDir(), "run")
	cmd := llmtest.Command(context.Background(), model, llmtest.Options{Tokens: 5, Threads: 1, JSON: true})
	args := append([]string{"record", "-o", dir, "--no-ingest", "--probe", "ops", "--"}, cmd.Args...)
	if _, errOut, err := runCmd(t, args...); err != nil {
		t.Fatalf("record: %v\n%s", err, errOut)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	op := m.OpProbes
	if op == nil {
		t.Fatal("meta.json has no op_probes")
	}
	if len(op.Files) != 1 || !strings.HasPrefix(filepath.Base(op.Files[0]), "libggml-cpu") || len(op.Idle) == 0 {
		t.Fatalf("op probes on %v, idle %d variants: want one libggml-cpu variant probed and the others idle", op.Files, len(op.Idle))
	}
	for _, p := range m.Probes {
		if strings.HasPrefix(p.Symbol, "ggml_compute_forward_*") && p.Target != op.Files[0] {
			t.Errorf("op probes attached to %s too", p.Target)
		}
	}
	// Every weight-reading node of each graph has its op event, and per
	// token the kernel's hit count equals the op events (one thread).
	nodesOf := map[uint64][]uint64{} // graph id → weight-reading nodes
	opOfNode := map[uint64]uint32{}
	weightOf := map[uint64]string{}
	opsOf := map[uint32]map[uint64]bool{}
	var graphs []struct {
		id    uint64
		token uint32
	}
	hitsAt, opEvents := map[uint32]uint64{}, map[uint32]uint64{}
	var checked int
	spoolEvents(t, dir, func(typ uint16, rec []byte) {
		d := decoded(t, rec)
		switch {
		case d.Node() != nil:
			n := d.Node()
			nodesOf[n.GraphId] = append(nodesOf[n.GraphId], n.Node)
			opOfNode[n.Node] = n.Op
			weightOf[n.Node] = bpf.CString(n.WeightName[:])
		case d.Graph() != nil:
			g := d.Graph()
			graphs = append(graphs, struct {
				id    uint64
				token uint32
			}{g.GraphId, g.Hdr.Token})
		case d.Op() != nil:
			o := d.Op()
			if opsOf[o.Hdr.Token] == nil {
				opsOf[o.Hdr.Token] = map[uint64]bool{}
			}
			opsOf[o.Hdr.Token][o.Node] = true
			opEvents[o.Hdr.Token]++
		case d.Decode() != nil:
			e := d.Decode()
			if e.Hdr.Type == uint16(bpf.IocorrEventTypeEV_DECODE_BEGIN) {
				hitsAt[e.Hdr.Token] = e.OpHits
				return
			}
			if hits := e.OpHits - hitsAt[e.Hdr.Token]; hits != opEvents[e.Hdr.Token] || hits == 0 {
				t.Errorf("token %d: %d op-probe hits counted in the kernel, %d op events", e.Hdr.Token, hits, opEvents[e.Hdr.Token])
			}
			checked++
		}
	})
	if checked != 5 || len(graphs) == 0 {
		t.Fatalf("%d decode calls checked, %d graphs", checked, len(graphs))
	}
	for _, g := range graphs {
		// A node without an op event is one whose op runs no probed
		// function: an empty op (VIEW) or one the build inlined, which
		// meta.json names with its node count.
		unprobed, fused := map[string]int{}, map[string]int{}
		for _, n := range nodesOf[g.id] {
			name := m.OpNames[opOfNode[n]]
			probed := slices.Contains(m.OpFuncs, "ggml_compute_forward_"+strings.ToLower(name))
			switch {
			case opsOf[g.token][n] && !probed:
				t.Errorf("token %d: node %#x of op %s has an op event but no probed function", g.token, n, name)
			case !opsOf[g.token][n] && probed && name == "MUL" && strings.HasSuffix(weightOf[n], "_norm.weight"):
				// ggml's CPU backend computes RMS_NORM and the MUL by the
				// norm weight in one call: that MUL never runs its own.
				fused[name]++
			case !opsOf[g.token][n] && probed:
				t.Errorf("token %d: node %#x of op %s (weight %s), whose function is probed, has no op event", g.token, n, name, weightOf[n])
			case !probed && name != "VIEW":
				unprobed[name]++
			}
		}
		if fmt.Sprint(unprobed) != fmt.Sprint(op.Unprobed) || fmt.Sprint(fused) != fmt.Sprint(op.Fused) {
			t.Errorf("token %d: nodes of unprobed ops %v and fused %v, meta.json says %v and %v", g.token, unprobed, fused, op.Unprobed, op.Fused)
		}
	}
	if op.PerHitNS <= 0 || op.CalibrationNA != "" || op.Tokens != 5 || op.HitsPerTokenMean <= 0 || op.OverheadRatio <= 0 ||
		op.BareMetalOverheadRatio[0] <= 0 || op.BareMetalOverheadRatio[1] < op.BareMetalOverheadRatio[0] {
		t.Errorf("op_probes %+v: want a measured cost per hit, hits per token and overhead estimates", *op)
	}
	t.Logf("op probes on %s (%d idle variants): %.0f hits per token, %d ns per hit, overhead %.1f%% here, %.2f–%.2f%% on bare metal",
		filepath.Base(op.Files[0]), len(op.Idle), op.HitsPerTokenMean, op.PerHitNS, 100*op.OverheadRatio,
		100*op.BareMetalOverheadRatio[0], 100*op.BareMetalOverheadRatio[1])
}
