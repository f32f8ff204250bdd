package recorder_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// The tests of this file record testdata/routeoracle — llama.cpp's own
// evaluation callback printing every MoE layer's picks — through the
// library, as `iocorr record` does (testkit/rectest), and hold the
// router probe's records and the store's picks to it.

// archSpec is the model each architecture is recorded on: 16 experts of
// which 2 are picked, so that a decode token reads an eighth of the
// experts. Quantized it is 29-42 MiB, more than archMemLimit leaves for
// the page cache besides the oracle's own ~11 MiB, so picked experts are
// read again while tokens decode, and a run takes ~5 s.
func archSpec(arch string) gguf.SynthSpec {
	return gguf.SynthSpec{Arch: arch, Layers: 4, Embd: 512, FF: 512, Heads: 8, KVHeads: 4, Experts: 16, ExpertsUsed: 2, Type: gguf.TypeBF16}
}

const (
	archMemLimit = "32MiB"
	archTokens   = 6
)

// archPrompt is 199 tokens in the synthesized vocabulary: its prompt
// call's ids span several router events of each MoE node at any number
// of experts used (an event holds 49 rows at two), so a row lost at an
// event's end shows, as the router probe once lost 15 of every 64.
var archPrompt = strings.Repeat("the quick brown fox jumps over the lazy dog ", 6)

// archRuns are the architectures and quantizations CI records, as
// llama-quantize names them: each architecture with a K-quant and with
// MXFP4 experts (llama-quantize's MXFP4_MOE makes every 3-D expert tensor
// MXFP4, whatever the architecture). IQ4_XS is left to gguf's offset
// test on small models: llama-quantize took 68 s to make it of one of
// these models on 2 vCPUs, against 7 s for Q4_K_M and 1 s for MXFP4_MOE.
var archRuns = []struct {
	arch   string
	ftypes []string
}{
	{gguf.ArchLlama, []string{"Q4_K_M", "MXFP4_MOE"}},
	{gguf.ArchQwen3MoE, []string{"Q6_K", "MXFP4_MOE"}},
	{gguf.ArchQwen2MoE, []string{"Q4_K_M", "MXFP4_MOE"}},
	{gguf.ArchGPTOSS, []string{"Q4_K_M", "MXFP4_MOE"}},
}

// routeKey is one row of a MoE layer's routing in one llama_decode call.
type routeKey struct {
	token uint32
	layer int
	row   int
}

// TestRecordEachArchAndQuantizationPicksWhatLlamaCppRouted records
// testdata/routeoracle — llama.cpp's own evaluation callback printing
// every layer's ffn_moe_topk, token by token — on each architecture and
// quantization, from a cold cache under a memory limit, with the weights
// kept in the model's mapping (--no-repack). In that one run:
//   - iocorr's router probe saw exactly the oracle's ids, per llama_decode
//     call, layer and row, and the store's picks per token, layer and
//     expert are their counts;
//   - every fault in an expert tensor (weights and gpt-oss's biases;
//     shared experts are no expert) while a token decodes lands in an
//     expert picked for that token and layer;
//   - every weight a graph node reads is at its GGUF offset, and an expert
//     tensor's slice is the stride llama.cpp itself gives its last
//     dimension (nb, read from its memory).
func TestRecordEachArchAndQuantizationPicksWhatLlamaCppRouted(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	oracle := llmtest.BuildRouteOracle(t)
	matrixPicked := 0
	defer func() {
		if !t.Failed() && matrixPicked == 0 {
			t.Errorf("no run of the matrix faulted in a picked expert while decoding: the check above showed nothing")
		}
	}()
	for _, ar := range archRuns {
		spec := archSpec(ar.arch)
		src := llmtest.Model(t, spec)
		for _, ft := range ar.ftypes {
			t.Run(ar.arch+"/"+ft, func(t *testing.T) {
				model := llmtest.Quantized(t, src, ft)
				f, err := gguf.Open(model)
				if err != nil {
					t.Fatal(err)
				}
				dir := filepath.Join(t.TempDir(), "run")
				rec, routing, _ := recordOracle(t, dir, archMemLimit, spec, append(llmtest.RouteOracleArgs(oracle, model, archTokens, true), "-p", archPrompt)...)
				summary := rec.Stderr
				probed := checkProbedRows(t, dir, f, routing)
				st := storetest.Open(t, dir)
				checkStoredPicks(t, st, routing)
				decodeTok, picks := rectest.DecodePicks(t, st)
				if want := (archTokens - 1) * spec.Layers * spec.ExpertsUsed; picks != want {
					t.Errorf("%d distinct decode picks, want %d", picks, want)
				}
				ef := rectest.CountExpertFaults(t, st, func(tok uint32) bool { return decodeTok[tok] })
				matrixPicked += ef.Picked
				// The limit must press on every run: the device read more
				// than the model, so pages were read again. Whether a decode
				// token then faults in an expert, or finds it brought back by
				// a neighbour's readahead, is the kernel's timing: a run of a
				// model near the limit (qwen2moe MXFP4, 32.6 MiB) read its
				// experts 5 times over with no decode expert fault. So that
				// is asked of the matrix, below, not of each run.
				var read uint64
				if err := st.Aggs(func(a *event.Agg) error {
					read += a.ReadBytes
					return nil
				}); err != nil {
					t.Fatal(err)
				}
				if read <= uint64(f.Size) {
					t.Errorf("the device read %d bytes of a %d-byte model: no memory pressure under %s\n%s", read, f.Size, archMemLimit, summary)
				}
				t.Logf("%s %s (%.1f MiB): %d rows of ids equal the oracle's; decode expert faults: %d in picked experts, %d on read-ahead pages",
					ar.arch, ft, float64(f.Size)/(1<<20), probed, ef.Picked, ef.ReadAhead)
			})
		}
	}
}

// recordOracle records the routing oracle's args into dir, cold under
// memLimit, and gives the run, the oracle's own routing (checked against
// llama.cpp's rules for spec) and meta.json; a lost event fails the test,
// for the comparison needs every one.
func recordOracle(t *testing.T, dir, memLimit string, spec gguf.SynthSpec, args ...string) (rectest.Output, llmtest.Routing, *rundir.Meta) {
	t.Helper()
	rec := rectest.Record(t, dir, rectest.Options{Cold: true, MemLimit: memLimit}, args...)
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	routing, err := llmtest.ParseRouting([]byte(rec.Stdout))
	if err != nil {
		// The oracle's end says why (the kernel's OOM kill under the
		// limit is a SIGKILL; the cgroup's counters say how near it ran).
		t.Fatalf("the oracle's output: %v; it exited %d (signal %q), max RSS %d KiB, the run's cgroup %v\nstdout:\n%s\nstderr:\n%s",
			err, m.Child.ExitCode, m.Child.Signal, m.Child.MaxRSSKiB, m.Controls.CgroupCounters, rec.Stdout, rec.Stderr)
	}
	for typ, n := range m.Lost {
		if n > 0 {
			t.Fatalf("lost %d %s events: the comparison needs every one", n, typ)
		}
	}
	checkOracleRouting(t, spec, routing)
	return rec, routing, m
}

// checkOracleRouting checks the oracle against llama.cpp's routing rules:
// one prefill call of the prompt, then one token per call; every row
// names ExpertsUsed distinct experts. In the prefill the last layer
// routes only the output rows (the one token whose logits are asked
// for), except in gpt-oss, whose graph (src/models/openai-moe.cpp) drops
// the other rows only after the last layer, so every layer routes every
// prompt token.
func checkOracleRouting(t *testing.T, spec gguf.SynthSpec, r llmtest.Routing) {
	t.Helper()
	if len(r.Calls) != archTokens {
		t.Fatalf("the oracle made %d llama_decode calls, want %d", len(r.Calls), archTokens)
	}
	for call, c := range r.Calls {
		want := 1
		if call == 1 {
			want = r.PromptTokens
		}
		if c.Tokens != want || len(c.Rows) != spec.Layers {
			t.Fatalf("call %d: %d tokens, %d MoE layers; want %d, %d", call, c.Tokens, len(c.Rows), want, spec.Layers)
		}
		for layer, rows := range c.Rows {
			n := c.Tokens
			if call == 1 && layer == spec.Layers-1 && spec.Arch != gguf.ArchGPTOSS {
				n = 1
			}
			if len(rows) != n {
				t.Errorf("call %d layer %d routed %d rows, want %d", call, layer, len(rows), n)
			}
			for _, ids := range rows {
				seen := map[int32]bool{}
				for _, id := range ids {
					if id < 0 || int(id) >= spec.Experts || seen[id] {
						t.Errorf("call %d layer %d: ids %v", call, layer, ids)
					}
					seen[id] = true
				}
				if len(ids) != spec.ExpertsUsed {
					t.Errorf("call %d layer %d: %d ids, want %d", call, layer, len(ids), spec.ExpertsUsed)
				}
			}
		}
	}
}

// checkProbedRows compares the router probe's raw records with the
// oracle, row by row, and checks every graph node's weight: at its GGUF
// offset, and for an expert tensor with llama.cpp's own stride of its
// last dimension equal to the GGUF's expert slice. It returns the rows
// compared.
func checkProbedRows(t *testing.T, dir string, f *gguf.File, r llmtest.Routing) int {
	t.Helper()
	probed := map[routeKey][]int32{}
	weights := map[string]bool{}
	badStride := 0
	rectest.CountDecodeCalls(t, dir, f, weights, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_EXPERTS):
			e := spooltest.Decoded(t, rec).Experts()
			name := wire.CString(e.Name[:])
			layer, err := strconv.Atoi(strings.TrimPrefix(name, "ffn_moe_weights-"))
			if err != nil || e.N_used == 0 {
				t.Errorf("experts event of node %q, %d used", name, e.N_used)
				return
			}
			for i := uint32(0); i+e.N_used <= e.Count; i += e.N_used {
				k := routeKey{e.Hdr.Token, layer, int((e.First + i) / e.N_used)}
				if _, dup := probed[k]; dup {
					t.Errorf("token %d layer %d row %d probed twice", k.token, k.layer, k.row)
				}
				probed[k] = append([]int32(nil), e.Ids[i:i+e.N_used]...)
			}
		case uint32(wire.EventTypeEV_NODE):
			e := spooltest.Decoded(t, rec).Node()
			tn := f.Tensor(wire.CString(e.WeightName[:]))
			if tn == nil || tn.Experts == 0 {
				return
			}
			if last := len(tn.Dims) - 1; int64(e.WeightNb[last]) != tn.ExpertSize || int64(e.WeightNe[last]) != int64(tn.Experts) {
				if badStride++; badStride <= 5 {
					t.Errorf("%s: llama.cpp's ne[%d] %d, nb[%d] %d; the GGUF's %d experts of %d bytes",
						tn.Name, last, e.WeightNe[last], last, e.WeightNb[last], tn.Experts, tn.ExpertSize)
				}
			}
		}
	})
	rectest.CheckLayerWeightsRead(t, f, weights)
	want := map[routeKey][]int32{}
	for call, c := range r.Calls {
		for layer, rows := range c.Rows {
			for row, ids := range rows {
				want[routeKey{call, layer, row}] = ids
			}
		}
	}
	bad := 0
	for k, ids := range want {
		if got, ok := probed[k]; !ok || !slices.Equal(got, ids) {
			if bad++; bad <= 5 {
				t.Errorf("token %d layer %d row %d: probed %v (%v), llama.cpp picked %v", k.token, k.layer, k.row, got, ok, ids)
			}
		}
	}
	for k, ids := range probed {
		if _, ok := want[k]; !ok {
			if bad++; bad <= 5 {
				t.Errorf("token %d layer %d row %d: probed %v, llama.cpp routed no such row", k.token, k.layer, k.row, ids)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d rows differ from the oracle", bad, len(want))
	}
	return len(want)
}

// checkStoredPicks checks the store's picks per token, layer and expert
// against the counts of the oracle's rows.
func checkStoredPicks(t *testing.T, st *store.Store, r llmtest.Routing) {
	t.Helper()
	want := map[[3]uint32]uint64{}
	for call, c := range r.Calls {
		for layer, rows := range c.Rows {
			for _, ids := range rows {
				for _, id := range ids {
					want[[3]uint32{call, uint32(layer), uint32(id)}]++
				}
			}
		}
	}
	got := map[[3]uint32]uint64{}
	if err := st.ExpertSelections(func(s event.ExpertSel) error {
		got[[3]uint32{s.Token, uint32(s.Layer), uint32(s.Expert)}] += s.Count
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored picks (token, layer, expert: count)\n%v\nllama.cpp's\n%v", got, want)
	}
}

// TestRecordRepackedExpertsAreReadFromMemoryNotTheFile records the same
// gpt-oss Q4_K_M model with llama.cpp's defaults, repacking on. On x86
// with AVX2 its CPU backend copies Q4_K weights, 3-D expert tensors
// included, into its CPU_REPACK buffer while loading (src/ggml-cpu/
// repack.cpp), and leaves Q6_K ones in the mapping: the Q4_K experts are
// named as read from memory, never fault while tokens decode, and the
// Q6_K ones are read from the file. The router's picks are the oracle's
// all the same.
func TestRecordRepackedExpertsAreReadFromMemoryNotTheFile(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	if cpu, err := os.ReadFile("/proc/cpuinfo"); err != nil || runtime.GOARCH != "amd64" || !strings.Contains(string(cpu), " avx2") {
		t.Skip("llama.cpp repacks Q4_K weights on x86 only with AVX2; this CPU has none")
	}
	oracle := llmtest.BuildRouteOracle(t)
	// Attention and output weights in BF16: on a CPU with AMX the AMX
	// buffer would take Q4_K and Q6_K ones of plain matrix products (not
	// the experts'), and on this lab's AMX machine llama.cpp's AMX kernel
	// died at its first tile instruction (SIGSEGV at ldtilecfg in
	// ggml_backend_amx_mul_mat), traced or not. BF16 is no AMX type.
	model := llmtest.QuantizedAs(t, llmtest.Model(t, archSpec(gguf.ArchGPTOSS)), "Q4_K_M-bf16-attn", "Q4_K_M",
		"--tensor-type", "attn=bf16", "--output-tensor-type", "bf16")
	dir := filepath.Join(t.TempDir(), "run")
	// The repacked weights are ~24 MiB of anonymous memory the limit must
	// hold too: under archMemLimit the oracle is killed while loading;
	// 48MiB still leaves the mapped Q6_K experts under pressure.
	rec := rectest.Record(t, dir, rectest.Options{Cold: true, MemLimit: "48MiB"},
		llmtest.RouteOracleArgs(oracle, model, archTokens, false)...)
	out := rec.Stdout
	// What `iocorr record` warns of as "read from anonymous memory, not
	// the model file".
	if len(rec.Ingest.NotFileBacked) == 0 {
		t.Errorf("the ingest names no weight read from memory:\n%s", rec.Stderr)
	}
	routing, err := llmtest.ParseRouting([]byte(out))
	if err != nil {
		t.Fatalf("the oracle's output: %v\n%s", err, out)
	}
	st := storetest.Open(t, dir)
	checkStoredPicks(t, st, routing)
	byType := map[gguf.Type]map[uint32]bool{gguf.TypeQ4_K: {}, gguf.TypeQ6_K: {}}
	for _, tn := range st.Tensors {
		typ, _ := gguf.ParseType(tn.Type)
		ids, ok := byType[typ]
		if !ok || !strings.HasSuffix(tn.Role, "_exps") {
			continue
		}
		ids[tn.ID] = true
		if tn.NotFileBacked != (typ == gguf.TypeQ4_K) {
			t.Errorf("%s (%s): read from memory %v", tn.Name, typ, tn.NotFileBacked)
		}
		// Where llama.cpp put each: the repacked ones copied into the CPU
		// backend's repack buffer while loading, the others mapped.
		if want := map[bool]string{true: "CPU_REPACK", false: "CPU_Mapped"}[typ == gguf.TypeQ4_K]; tn.Device != want || tn.Copied != (typ == gguf.TypeQ4_K) {
			t.Errorf("%s (%s): device %q, copied %v; want %s", tn.Name, typ, tn.Device, tn.Copied, want)
		}
	}
	if len(byType[gguf.TypeQ4_K]) == 0 || len(byType[gguf.TypeQ6_K]) == 0 {
		t.Fatalf("expert tensors of Q4_K and Q6_K: %d, %d; Q4_K_M makes both", len(byType[gguf.TypeQ4_K]), len(byType[gguf.TypeQ6_K]))
	}
	decodeTok, _ := rectest.DecodePicks(t, st)
	faults := map[gguf.Type]int{}
	for typ, ids := range byType {
		if err := st.Events(store.EventFilter{Tensors: ids}, func(e *event.Event) error {
			if e.Kind == event.KindFault && decodeTok[e.Token] {
				faults[typ]++
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if faults[gguf.TypeQ4_K] != 0 || faults[gguf.TypeQ6_K] == 0 {
		t.Errorf("decode faults in repacked Q4_K experts %d, want none; in mapped Q6_K experts %d, want some",
			faults[gguf.TypeQ4_K], faults[gguf.TypeQ6_K])
	}
	t.Logf("decode faults in expert tensors: Q4_K (repacked) %d, Q6_K (mapped) %d", faults[gguf.TypeQ4_K], faults[gguf.TypeQ6_K])
}
