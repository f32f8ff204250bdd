package recorder_test

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestRecordHybridOffloadPicksWhatLlamaCppRouted records the routing
// oracle with layers on llama.cpp's Vulkan backend (lavapipe, on the CPU)
// and every layer's experts left in the model's mapping on the CPU
// (-ngl 99 --cpu-moe; -ngl 4 --cpu-moe, the first layers wholly on the
// CPU), from a cold cache under a memory limit. The router
// runs on the GPU backend there: its top-k and the gather of its weights
// never reach the CPU's get_rows, and the CPU split of each layer gets
// the ids as an input the scheduler copied over. In that one run:
//   - the scheduler split each token's graph (more graph computations
//     than llama_decode calls);
//   - the store's picks per token, layer and expert equal the oracle's
//     (read by its cb_eval through ggml_backend_tensor_get from the GPU's
//     buffer), and decode picks are decode tokens × layers × experts used;
//   - no layer's picks are NA; but with a prompt of 32 tokens or more
//     (GGML_OP_OFFLOAD_MIN_BATCH) and llama.cpp's default op offload, the
//     scheduler runs the prefill's MUL_MAT_ID of the CPU's experts on the
//     GPU: that call's picks are NA, saying so, for every layer but the
//     last (whose one output row stays on the CPU, exact), while decode
//     picks stay exact; --no-op-offload keeps them all on the CPU, exact;
//   - the recorded major faults are the child's own (rusage), and the
//     device read bytes of expert tensors, their faults charged to them;
//   - each tensor's device bytes are the disk's completions of its sectors
//     (an ftrace instance, testkit/blocktrace), byte for byte;
//   - each weight's device is the buffer llama.cpp put it in (checkDevices);
//   - each CPU split's computation is timed, inside its token's call
//     (checkSplitTimes).
func TestRecordHybridOffloadPicksWhatLlamaCppRouted(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	hy := llmtest.HybridDir(t)
	oracle := llmtest.BuildRouteOracle(t)
	spec := llmtest.MoE
	model := llmtest.Model(t, spec)
	md := openModelDisk(t, model)
	llmtest.SetHybridEnv(t)
	// The oracle was linked against the shared build: its libllama.so.0
	// and libggml.so.0 are then the Vulkan build's, from the hybrid dir.
	t.Setenv("LD_LIBRARY_PATH", hy)
	// 34 tokens of the test model's vocabulary: a batch past llama.cpp's
	// op offload threshold of 32, and within one 49-row chunk of the
	// router probe's ids.
	const longPrompt = "the quick brown fox jumps over the lazy dog"
	for _, tc := range []struct {
		name    string
		offload []string
		gpuFrom int // the first layer llama.cpp puts on the GPU
		// prefillNA: the prompt's batch takes the op offload, leaving its
		// picks of every layer but the last unseen.
		prefillNA bool
		memLimit  string
	}{
		{"every layer on the gpu, experts on the cpu", llmtest.HybridArgs(-1), 0, false, llmtest.HybridMemLimit},
		// The offloaded MUL_MAT_ID copies each layer's experts into
		// lavapipe's buffers, anonymous memory charged to the run's cgroup:
		// under 112 MiB the kernel killed the oracle in its prefill; under
		// 256 MiB it ran, with 64 major faults in the model file.
		{"a prompt of 32 tokens: its prefill's MUL_MAT_ID offloaded to the gpu", append(llmtest.HybridArgs(-1), "-p", longPrompt), 0, true, "256MiB"},
		// -ngl counts the output layer: layers 5-7 and the output on the
		// GPU as above, 0-4 wholly on the CPU, whose router's get_rows the
		// CPU runs: both ways of reading picks in one run; with op offload
		// off, a long prompt's too.
		{"the last 3 layers and the output on the gpu, experts on the cpu, op offload off", []string{"-ngl", "4", "--cpu-moe", "--no-op-offload", "-p", longPrompt}, spec.Layers - 3, false, llmtest.HybridMemLimit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			args := append(llmtest.RouteOracleArgs(oracle, model, archTokens, true), "--backends", hy)
			args = append(args, tc.offload...)
			llmtest.WarmShaderCache(t, "routeoracle-"+strings.Join(tc.offload, ""), args, "LD_LIBRARY_PATH="+hy)
			ct := md.trace(t)
			rec, routing, m := recordOracle(t, dir, tc.memLimit, spec, args...)
			ct.Stop(t)
			st := storetest.Open(t, dir)
			ours, theirs := md.checkTensorBytes(t, st, ct)
			t.Logf("the model's device bytes: iocorr %d, the completions %d, tensor by tensor", ours, theirs)
			if slices.Contains(tc.offload, longPrompt) && routing.PromptTokens < 32 {
				t.Fatalf("the long prompt is %d tokens, want 32 or more (GGML_OP_OFFLOAD_MIN_BATCH)", routing.PromptTokens)
			}
			if tc.prefillNA {
				checkPrefillOffloaded(t, st, &routing, spec.Layers)
			} else if why := st.Summary.PicksNA(); why != "" {
				t.Errorf("picks NA: %s", why)
			}
			checkStoredPicks(t, st, routing)
			decodeTok, picks := rectest.DecodePicks(t, st)
			if want := (archTokens - 1) * spec.Layers * spec.ExpertsUsed; picks != want {
				t.Errorf("%d distinct decode picks, want %d", picks, want)
			}
			if why := m.PicksNA(); why != "" {
				t.Errorf("picks NA: %s", why)
			}

			var graphs, decodes, major int
			spooltest.Events(t, dir, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(wire.EventTypeEV_GRAPH):
					graphs++
				case uint32(wire.EventTypeEV_DECODE_BEGIN):
					decodes++
				}
			})
			spooltest.Faults(t, dir, func(_ *wire.EventHdr, class uint8, n uint64, _ *wire.FaultEvent) {
				if class == uint8(wire.FaultClassFAULT_MAJOR) {
					major += int(n)
				}
			})
			if decodes != archTokens || graphs <= decodes {
				t.Errorf("%d graph computations for %d llama_decode calls: want %d calls, each split into several graphs", graphs, decodes, archTokens)
			}
			if int64(major) != m.Child.MajFlt || major == 0 {
				t.Errorf("%d major faults recorded, the child's rusage says %d: want equal, not 0", major, m.Child.MajFlt)
			}
			var expertRead uint64
			experts := map[uint32]bool{}
			for _, tn := range st.Tensors {
				if tn.Experts > 0 {
					experts[tn.ID] = true
				}
			}
			if err := st.Aggs(func(a *event.Agg) error {
				if experts[a.Tensor] {
					expertRead += a.ReadBytes
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			ef := rectest.CountExpertFaults(t, st, func(tok uint32) bool { return decodeTok[tok] })
			if expertRead == 0 {
				t.Errorf("no device bytes charged to expert tensors under %s", tc.memLimit)
			}
			checkDevices(t, st, rec.Stderr, tc.gpuFrom)
			checkLayerDevices(t, st, tc.gpuFrom)
			checkLoadReads(t, st)
			if t.Failed() {
				// What the kernel recorded of each buffer's name: a name
				// recorded empty left every weight of its buffer without a
				// device (a fresh clone's run, before the return probe's
				// unreadable names were read again at the next call).
				spooltest.BufNames(t, dir, func(b *wire.BufnameEvent) {
					t.Logf("buffer %#x named %q at %d ns, tid %d", b.Buffer, wire.CString(b.Name[:]), b.Hdr.Ts, b.Hdr.Tid)
				})
			}
			checkSplitTimes(t, st)
			t.Logf("hybrid run: %d graphs for %d calls, %d major faults (rusage %d), %d decode picks; expert tensors read %.1f MiB; decode expert faults: %d in picked experts, %d on read-ahead pages, %d neither",
				graphs, decodes, major, m.Child.MajFlt, picks, float64(expertRead)/(1<<20), ef.Picked, ef.ReadAhead, ef.Neither)
		})
	}
}

// TestRecordHybridOffloadTensorOverridesSplitTheLayers records
// llama-completion (the Shared build's, on the Vulkan build's libraries)
// with llama.cpp's own tensor overrides: -ngl 99, and -ot keeping layers
// 0-2 wholly and every layer's experts on the CPU (one -ot of two
// patterns: of several -ot flags llama.cpp keeps the last). From a cold
// cache, the per-layer split shows in query --by layer (0-2 CPU_Mapped,
// 3-7 CPU_Mapped+Vulkan0), each weight's device is the buffer llama.cpp's
// log names, and the copied weights' reads are the load's. -fit off:
// llama-completion otherwise loads the model once without weights first
// to fit it to the device, logging buffers of no size.
func TestRecordHybridOffloadTensorOverridesSplitTheLayers(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	hy := llmtest.HybridDir(t)
	model := llmtest.Model(t, llmtest.MoE)
	llmtest.SetHybridEnv(t)
	const cpuLayers = 3
	args := append(llmtest.CompletionArgs(filepath.Join(hy, "llama-completion"), model, 3),
		"-ngl", "99", "-ot", `blk\.[0-2]\.=CPU,exps=CPU`, "--no-repack", "-fit", "off", "-v")
	llmtest.WarmShaderCache(t, "completion-ot", args)
	dir := filepath.Join(t.TempDir(), "run")
	rec := rectest.Record(t, dir, rectest.Options{Cold: true}, args...)
	st := storetest.Open(t, dir)
	checkDevices(t, st, rec.Stderr, cpuLayers)
	checkLayerDevices(t, st, cpuLayers)
	checkLoadReads(t, st)
}

// checkPrefillOffloaded checks a run whose prompt's batch took llama.cpp's
// op offload: its decode picks are exact (no NA of the decode phase), its
// prefill picks NA saying which layers were unseen in the prompt's call
// and why, and the store holds none of those layers' prefill picks, only
// the last layer's output row. It leaves in r what the store must equal:
// the oracle's routing without the unseen prefill rows.
func checkPrefillOffloaded(t *testing.T, st *store.Store, r *llmtest.Routing, layers int) {
	t.Helper()
	if why := st.Summary.PicksNAOf(&store.Query{Phase: "decode"}); why != "" {
		t.Errorf("decode picks NA: %s", why)
	}
	prefill := st.Summary.PicksNAOf(&store.Query{Phase: "prefill"})
	seen := fmt.Sprintf("token 1 (prefill, %d tokens): layer 0-%d none of %d rows seen", r.PromptTokens, layers-2, r.PromptTokens)
	for _, want := range []string{seen, "op offload ran those batches' MUL_MAT_ID on the GPU", "--no-op-offload"} {
		if !strings.Contains(prefill, want) {
			t.Errorf("prefill picks NA %q, want it to say %q", prefill, want)
		}
	}
	if whole := st.Summary.PicksNA(); whole != prefill {
		t.Errorf("the run's picks NA %q, want the prefill's", whole)
	}
	for l := range layers - 1 {
		delete(r.Calls[1].Rows, l)
	}
}

// checkDevices checks where the store says each weight lived against the
// offload flags (layers from gpuFrom on the GPU) and llama.cpp's own log of its model buffers (printed by
// the oracle: "load_tensors: Vulkan0 model buffer size = 16.66 MiB"):
// the experts mapped (CPU_Mapped, never copied), every other tensor of a
// layer copied into the GPU backend's buffer while loading, and the
// weights of each copied-into buffer adding up to its size (the buffer
// pads each tensor to its alignment); the load's reads of copied weights
// are the load's: no fault on them in a token.
func checkDevices(t *testing.T, st *store.Store, log string, gpuFrom int) {
	t.Helper()
	bufs := map[string]float64{} // name → MiB
	for _, m := range regexp.MustCompile(`(\S+) model buffer size = +([0-9.]+) MiB`).FindAllStringSubmatch(log, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		bufs[m[1]] = v
	}
	sums := map[string]int64{}
	copied := map[uint32]bool{}
	for _, tn := range st.Tensors {
		if tn.Pseudo() {
			continue
		}
		sums[tn.Device] += tn.Size
		exps := strings.HasSuffix(tn.Role, "_exps")
		switch {
		case exps && (tn.Device != "CPU_Mapped" || tn.Copied):
			t.Errorf("%s: device %q, copied %v; --cpu-moe leaves it mapped", tn.Name, tn.Device, tn.Copied)
		case !exps && tn.Layer >= gpuFrom && (!strings.HasPrefix(tn.Device, "Vulkan") || !tn.Copied):
			t.Errorf("%s: device %q, copied %v; -ngl copies it into the GPU's buffer", tn.Name, tn.Device, tn.Copied)
		case !exps && tn.Layer >= 0 && tn.Layer < gpuFrom && (tn.Device != "CPU_Mapped" || tn.Copied):
			t.Errorf("%s: device %q, copied %v; a layer -ngl leaves on the CPU stays mapped", tn.Name, tn.Device, tn.Copied)
		case tn.Device == "":
			t.Errorf("%s: no device", tn.Name)
		}
		if tn.Copied {
			copied[tn.ID] = true
		}
	}
	for name := range sums {
		if _, ok := bufs[name]; !ok {
			t.Errorf("device %q is no buffer of llama.cpp's log %v", name, bufs)
		}
	}
	if len(bufs) != 2 || len(sums) != 2 {
		t.Errorf("llama.cpp's buffers %v, the store's devices (bytes) %v: want the CPU's and the GPU's", bufs, sums)
	}
	for name, mib := range bufs {
		got := float64(sums[name]) / (1 << 20)
		// The mapped buffer spans the file from its first to its last
		// mapped weight, copied ones between included.
		if got > mib+0.01 || !strings.HasPrefix(name, "CPU") && got < mib*0.99 {
			t.Errorf("%s: weights of %.2f MiB, llama.cpp's buffer %.2f MiB", name, got, mib)
		}
	}
	var tokenFaults int
	if err := st.Events(store.EventFilter{Tensors: copied}, func(e *event.Event) error {
		if e.Kind == event.KindFault && e.Token != 0 {
			tokenFaults++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(copied) == 0 || tokenFaults != 0 {
		t.Errorf("%d weights copied while loading, %d faults on them while tokens ran: want some, none", len(copied), tokenFaults)
	}
	t.Logf("devices: llama.cpp's buffers %v MiB; the store's weights by device %v bytes", bufs, sums)
}

// checkLayerDevices checks query --by layer's devices against the
// offload: a layer from gpuFrom on has its experts mapped and the rest in
// the GPU's buffer, one before wholly mapped.
func checkLayerDevices(t *testing.T, st *store.Store, gpuFrom int) {
	t.Helper()
	rows, err := st.Query(store.Query{By: "layer"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int]string{}
	for _, r := range rows {
		if l, err := strconv.Atoi(r.Key); err == nil && l >= 0 {
			got[l] = r.Devices
		}
	}
	for l := range llmtest.MoE.Layers {
		want := "CPU_Mapped"
		if l >= gpuFrom {
			want = "CPU_Mapped+Vulkan0"
		}
		if got[l] != want {
			t.Errorf("layer %d: devices %q, want %q", l, got[l], want)
		}
	}
}

// checkLoadReads checks that the reads of the weights the loader copied
// into a backend's buffer while loading are the load's, charged to those
// weights: from a cold cache every byte of them came from the disk then
// (token 0, before the first llama_decode; more than once under the
// memory limit), no read before the first call is charged to a token, and
// no fault on them comes in a token (the GPU reads its copy). Their bytes
// in the model's mapping are read again in tokens all the same, by the
// readahead around the experts' faults (the file interleaves each layer's
// experts with its other weights): logged, that is the tokens' I/O.
func checkLoadReads(t *testing.T, st *store.Store) {
	t.Helper()
	copied := map[uint32]bool{}
	var size int64
	for _, tn := range st.Tensors {
		if tn.Copied {
			copied[tn.ID] = true
			size += tn.Size
		}
	}
	first := uint64(0)
	if err := st.EachToken(func(ti *event.TokenInfo) error {
		if ti.StartNS != 0 && (first == 0 || ti.StartNS < first) {
			first = ti.StartNS
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(copied) == 0 || first == 0 {
		t.Fatalf("%d weights copied, first llama_decode at %d ns: want both", len(copied), first)
	}
	var loadBytes, tokenBytes, tokenFaults uint64
	if err := st.Aggs(func(a *event.Agg) error {
		switch {
		case !copied[a.Tensor]:
		case a.Token == 0:
			loadBytes += a.ReadBytes
		default:
			tokenBytes += a.ReadBytes
			tokenFaults += a.Faults
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var early, earlyInToken int
	if err := st.Events(store.EventFilter{Tensors: copied}, func(e *event.Event) error {
		if (e.Kind == event.KindFault || e.Kind == event.KindBlock) && e.Ts < first {
			early++
			if e.Token != 0 {
				earlyInToken++
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if loadBytes < uint64(size) || earlyInToken != 0 || early == 0 || tokenFaults != 0 {
		t.Errorf("weights copied at load (%d bytes): %d bytes read charged to the load; of %d faults and reads before the first call, %d charged to a token; %d faults in tokens: want all their bytes read by the load and charged to it, no fault in a token",
			size, loadBytes, early, earlyInToken, tokenFaults)
	}
	t.Logf("weights copied at load: %d bytes, %d read by the load (%d faults and reads), %d read again in tokens by readahead", size, loadBytes, early, tokenBytes)
}

// checkSplitTimes checks the timeline's graph computations: each begun
// (MarkGraph) returned (MarkGraphEnd) on its thread, with its begin and
// sequence number, inside the llama_decode call of its token.
func checkSplitTimes(t *testing.T, st *store.Store) {
	t.Helper()
	type key struct{ tid, seq uint32 }
	begun := map[key]uint64{}
	calls := map[uint32][2]uint64{} // token → decode begin, end
	var ends []event.Mark
	if err := st.Marks(func(m *event.Mark) error {
		switch m.Kind {
		case event.MarkGraph:
			begun[key{m.Tid, m.Seq}] = m.Ts
		case event.MarkGraphEnd:
			ends = append(ends, *m)
		case event.MarkDecodeEnd:
			calls[m.Token] = [2]uint64{m.Begin, m.Ts}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var splitNS, callNS uint64
	for _, m := range ends {
		b, ok := begun[key{m.Tid, m.Seq}]
		c := calls[m.Token]
		if !ok || b != m.Begin || m.Ts < m.Begin || m.Begin < c[0] || m.Ts > c[1] {
			t.Errorf("graph %d of thread %d timed %d..%d (begun at %d, %v), its token %d's call %d..%d", m.Seq, m.Tid, m.Begin, m.Ts, b, ok, m.Token, c[0], c[1])
			continue
		}
		splitNS += m.Ts - m.Begin
		delete(begun, key{m.Tid, m.Seq})
	}
	for _, c := range calls {
		callNS += c[1] - c[0]
	}
	if len(begun) != 0 || len(ends) == 0 {
		t.Errorf("%d graph computations never returned, %d did", len(begun), len(ends))
	}
	t.Logf("%d CPU graph computations timed: %.0f ms of %.0f ms in llama_decode", len(ends), float64(splitNS)/1e6, float64(callNS)/1e6)
}
