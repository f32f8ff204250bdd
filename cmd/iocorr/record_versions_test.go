package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/internal/spooltest"
	"github.com/iocorr/iocorr/rundir"
)

// TestRecordEachNodeLlamaCppReleaseUnderMemoryLimit is the version
// matrix: node-llama-cpp's prebuilt llama.cpp of late 2024 (b4234) to now
// (3.22.1), each driving an MoE model from a cold cache under a memory
// limit with --probe ops. Each release is its own build of ggml — other
// op enums, op functions static and inlined or exported, a
// ggml_compute_forward dispatcher or none — and iocorr must read each as
// it is:
//   - every llama_decode call the driver made is recorded, with its phase;
//   - the router's picks: decode tokens × layers × experts_used, and
//     every fault in an expert tensor while a token decodes lands in an
//     expert picked for that token and layer (or on a read-ahead page);
//   - every weight a graph node reads is at its GGUF file offset;
//   - every weight-reading node's op is recorded, or the run names the op
//     as one this build has no probe point for or computes fused.
func TestRecordEachNodeLlamaCppReleaseUnderMemoryLimit(t *testing.T) {
	spec := llmtest.MoE
	model, f := recordableMoE(t)
	const tokens = 6
	versions := []string{""} // the default, 3.22.1
	for _, v := range llmtest.Versions {
		versions = append(versions, v.NodeLlamaCpp)
	}
	for _, v := range versions {
		name := v
		if v == "" {
			name = "3.22.1"
		}
		t.Run(name, func(t *testing.T) {
			if v != "" {
				llmtest.RequireVersion(t, v)
			}
			dir := filepath.Join(t.TempDir(), "run")
			cmd := llmtest.Command(context.Background(), model, llmtest.Options{Tokens: tokens, Threads: 2, JSON: true, Version: v})
			args := append([]string{"record", "-o", dir, "--cold", "--mem-limit", llmtest.MemLimit, "--probe", "ops,pagecache", "--"}, cmd.Args...)
			out, summary, err := runCmd(t, args...)
			if err != nil {
				t.Fatalf("record: %v\n%s", err, summary)
			}
			var report llmtest.Result
			if i := strings.LastIndex(strings.TrimSpace(out), "\n{"); i >= 0 {
				out = out[i+1:]
			}
			if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &report); err != nil {
				t.Fatalf("driver output %q: %v", out, err)
			}
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			spooltest.CheckNothingLost(t, m.Lost)
			for _, lib := range m.Libraries {
				if v != "" && !strings.HasPrefix(lib.Path, llmtest.VersionDir(v)) {
					t.Errorf("probed %s, not a library of node-llama-cpp %s", lib.Path, v)
				}
			}
			if m.Layout == nil || !strings.Contains(m.Layout.Source, "validated") {
				t.Errorf("ggml layout %+v was not validated against this build", m.Layout)
			}

			weights := map[string]bool{}
			weightNodes := map[uint64]uint32{} // node → op
			opNodes := map[uint64]bool{}
			prefill, decode := countDecodeCalls(t, dir, f, weights, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(bpf.IocorrEventTypeEV_NODE):
					if e := decoded(t, rec).Node(); f.Tensor(bpf.CString(e.WeightName[:])) != nil {
						weightNodes[e.Node] = e.Op
					}
				case uint32(bpf.IocorrEventTypeEV_OP):
					opNodes[decoded(t, rec).Op().Node] = true
				}
			})
			if prefill != report.PromptBatches || prefill+decode != report.DecodeCallsExpected {
				t.Errorf("recorded %d prefill + %d decode calls of llama_decode, the driver made %d + %d\n%s",
					prefill, decode, report.PromptBatches, report.DecodeCallsExpected-report.PromptBatches, summary)
			}
			checkLayerWeightsRead(t, f, weights)

			// Ops: a weight-reading node without an op event is allowed
			// only for an op meta.json's op_probes says has no function
			// in the build (unprobed) or ran inside a neighbour (fused:
			// 3.22.1's RMS_NORM+MUL).
			unprobed := map[string]int{}
			for node, op := range weightNodes {
				if !opNodes[node] {
					unprobed[opName(m.OpNames, op)]++
				}
			}
			// The op probe points are what the probed files offer: the
			// dispatcher alone where a file has it (3.3.0, 3.6.0), the
			// exported op functions otherwise.
			wantFuncs := map[string]bool{}
			if m.OpProbes != nil {
				for _, lib := range m.OpProbes.Files {
					_, ops, _, err := ggml.FileSymbols(lib)
					if err != nil {
						t.Fatal(err)
					}
					for _, o := range ops {
						wantFuncs[o] = true
					}
				}
			}
			gotFuncs := map[string]bool{}
			for _, f := range m.OpFuncs {
				gotFuncs[f] = true
			}
			if len(gotFuncs) == 0 || fmt.Sprint(gotFuncs) != fmt.Sprint(wantFuncs) {
				t.Errorf("op probes on %v, the probed files %v offer %v", m.OpFuncs, m.OpProbes, wantFuncs)
			}
			var said []string
			for op, n := range unprobed {
				if m.OpProbes == nil || m.OpProbes.Unprobed[op] == 0 && m.OpProbes.Fused[op] == 0 {
					t.Errorf("%d nodes of op %s read weights and have no op event, and the run does not say why (op_probes %+v)\n%s", n, op, m.OpProbes, summary)
				}
				said = append(said, op)
			}
			sort.Strings(said)

			st, err := index.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			decodeTok, picks := decodePicks(t, st)
			if want := len(decodeTok) * spec.Layers * spec.ExpertsUsed; picks != want || len(decodeTok) != decode {
				t.Errorf("router picks in %d decode tokens (of %d decode calls): %d, want %d layers × %d experts each = %d",
					len(decodeTok), decode, picks, spec.Layers, spec.ExpertsUsed, want)
			}
			ef := countExpertFaults(t, st, func(tok uint32) bool { return decodeTok[tok] })
			if ef.picked == 0 {
				t.Errorf("no fault in a picked expert while decoding: the run had no memory pressure\n%s", summary)
			}
			t.Logf("node-llama-cpp %s: %d prefill + %d decode calls, %d picks, %d weight-reading nodes (op probes: %d functions%s; ops without an op event: %v); expert faults while decoding: %d picked, %d read ahead, %d neither",
				name, prefill, decode, picks, len(weightNodes), len(m.OpFuncs), map[bool]string{true: ", the dispatcher"}[gotFuncs[ggml.SymDispatch]], said, ef.picked, ef.readAhead, ef.neither)
		})
	}
}

func opName(names []string, op uint32) string {
	if int(op) < len(names) {
		return names[op]
	}
	return fmt.Sprintf("op %d (beyond the op-name table)", op)
}
