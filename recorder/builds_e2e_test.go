package recorder_test

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/wire"
)

// The tests of this file record llama.cpp's builds and releases driving
// llmtest.MoE from a cold cache under llmtest.MemLimit, through the
// library as `iocorr record` does, and hold each run to what the program
// did: its llama_decode calls, the router's picks, the weights' offsets.

// moeRun is such a run, read back and checked by recordMoE.
type moeRun struct {
	dir             string
	out             rectest.Output
	meta            *rundir.Meta
	prefill, decode int // llama_decode calls recorded, by phase
	picks           int // distinct router picks in decode tokens
	decodeTok       map[uint32]bool
	ef              rectest.ExpertFaults
}

// recordMoE records argv (a program generating on model, the file of
// llmtest.MoE) with the given probe sets, which include pagecache:
// CountExpertFaults tells read-ahead pages by their adds. It checks what
// every such run must show: every graph node's weight at its GGUF offset
// and every layer tensor read by one; the router's picks, ExpertsUsed
// per layer in each decode token, and a decode token for each decode
// call; faults in picked experts while decoding (memory pressure), and
// every expert fault in a picked expert or on a read-ahead page. Every
// record of the spool also goes to more, when set.
func recordMoE(t *testing.T, f *gguf.File, probe string, more func(typ uint16, rec []byte), argv ...string) moeRun {
	t.Helper()
	spec := llmtest.MoE
	r := moeRun{dir: filepath.Join(t.TempDir(), "run")}
	r.out = rectest.Record(t, r.dir, rectest.Options{Cold: true, MemLimit: llmtest.MemLimit, Probe: probe}, argv...)
	var err error
	if r.meta, err = rundir.ReadMeta(r.dir); err != nil {
		t.Fatal(err)
	}
	weights := map[string]bool{}
	r.prefill, r.decode = rectest.CountDecodeCalls(t, r.dir, f, weights, more)
	rectest.CheckLayerWeightsRead(t, f, weights)

	st := storetest.Open(t, r.dir)
	r.decodeTok, r.picks = rectest.DecodePicks(t, st)
	if want := len(r.decodeTok) * spec.Layers * spec.ExpertsUsed; r.picks != want || len(r.decodeTok) != r.decode {
		t.Errorf("router picks in %d decode tokens (of %d decode calls): %d, want %d layers × %d experts each = %d",
			len(r.decodeTok), r.decode, r.picks, spec.Layers, spec.ExpertsUsed, want)
	}
	// Every fault in an expert tensor while a token decodes lands in an
	// expert the router picked for that token and layer, or on a page
	// readahead brought in.
	r.ef = rectest.CountExpertFaults(t, st, func(tok uint32) bool { return r.decodeTok[tok] })
	if r.ef.Picked == 0 {
		t.Errorf("no fault in a picked expert while decoding: the run had no memory pressure\n%s", r.out.Stderr)
	}
	return r
}

// TestRecordBuiltCompletionUnderMemoryLimitSeesTokensExpertsAndWeights is
// the design card's own example, `iocorr record --cold --mem-limit … --
// llama-completion -m moe.gguf -p "…" -n N`, on llama.cpp built from the
// source node-llama-cpp ships, once as shared libraries and once as one
// static executable (every probe point inside the executable itself).
//
// llama-completion -n N calls llama_decode N times: once for the prompt,
// one batch that yields the first token, and once per further token
// (testkit/llmtest's TestBuiltCompletionGeneratesTokensNonInteractively
// counts that with bpftrace). The prompt is several tokens, so the first
// call is the prefill and the other N-1 decode one token each; in every
// decode token each layer's router picks ExpertsUsed experts.
func TestRecordBuiltCompletionUnderMemoryLimitSeesTokensExpertsAndWeights(t *testing.T) {
	model, f := rectest.RecordableMoE(t)
	const n = 6
	for _, b := range llmtest.Builds {
		t.Run(b.String(), func(t *testing.T) {
			r := recordMoE(t, f, "pagecache", nil, llmtest.CompletionArgs(llmtest.CLI(t, b, "llama-completion"), model, n)...)
			// Every probe point is in this build: nothing is said missing.
			for _, w := range r.meta.Warnings {
				if strings.Contains(w, "is in none of the files searched") {
					t.Errorf("warning on a build that has every probe point: %s", w)
				}
			}
			if r.prefill != 1 || r.decode != n-1 {
				t.Errorf("recorded %d prefill and %d decode calls of llama_decode, llama-completion -n %d made 1 and %d\n%s", r.prefill, r.decode, n, n-1, r.out.Stderr)
			}
			t.Logf("%s: %d prefill + %d decode calls, %d picks; expert faults while decoding: %d in picked experts, %d on read-ahead pages, %d neither",
				b, r.prefill, r.decode, r.picks, r.ef.Picked, r.ef.ReadAhead, r.ef.Neither)
		})
	}
}

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
	model, f := rectest.RecordableMoE(t)
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
			cmd := llmtest.Command(t.Context(), model, llmtest.Generation{Tokens: tokens, Threads: 2, JSON: true, Version: v})
			weightNodes := map[uint64]uint32{} // node → op
			opNodes := map[uint64]bool{}
			r := recordMoE(t, f, "ops,pagecache", func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(wire.EventTypeEV_NODE):
					if e := spooltest.Decoded(t, rec).Node(); f.Tensor(wire.CString(e.WeightName[:])) != nil {
						weightNodes[e.Node] = e.Op
					}
				case uint32(wire.EventTypeEV_OP):
					opNodes[spooltest.Decoded(t, rec).Op().Node] = true
				}
			}, cmd.Args...)
			m, summary := r.meta, r.out.Stderr
			report, err := llmtest.ParseResult([]byte(r.out.Stdout))
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
			if r.prefill != report.PromptBatches || r.prefill+r.decode != report.DecodeCallsExpected {
				t.Errorf("recorded %d prefill + %d decode calls of llama_decode, the driver made %d + %d\n%s",
					r.prefill, r.decode, report.PromptBatches, report.DecodeCallsExpected-report.PromptBatches, summary)
			}

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
					syms, err := ggml.FileSymbols(lib)
					if err != nil {
						t.Fatal(err)
					}
					for _, o := range syms.Ops {
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
			t.Logf("node-llama-cpp %s: %d prefill + %d decode calls, %d picks, %d weight-reading nodes (op probes: %d functions%s; ops without an op event: %v); expert faults while decoding: %d picked, %d read ahead, %d neither",
				name, r.prefill, r.decode, r.picks, len(weightNodes), len(m.OpFuncs), map[bool]string{true: ", the dispatcher"}[gotFuncs[ggml.SymDispatch]], said, r.ef.Picked, r.ef.ReadAhead, r.ef.Neither)
		})
	}
}

func opName(names []string, op uint32) string {
	if int(op) < len(names) {
		return names[op]
	}
	return fmt.Sprintf("op %d (beyond the op-name table)", op)
}
