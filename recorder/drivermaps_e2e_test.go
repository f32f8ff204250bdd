package recorder_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestRecordDriverMappedBuffersKeepPicksDevicesAndBytes reproduces, on a
// machine without a GPU, what a hybrid run on a real NVIDIA GPU showed:
// the driver maps its host-visible buffers from its device files
// (/dev/nvidia0, /dev/nvidiactl, rw-s) and from memfds, and a graph input
// (inp_tokens) lives there. testdata/driveralloc, preloaded into the
// routing oracle, puts ggml's CPU buffers (the compute buffer with the
// graph's inputs, the KV cache) into each such kind of shared mapping in
// turn: a memfd, a device node (a loop block device: this VM has no
// mappable character device), shmem's /dev/zero and a regular file that
// is no model. From a cold cache under a memory limit, in each run:
//   - the ggml layout validates: no node fails, nothing detaches, and no
//     warning names the driver's mappings or the layout;
//   - the store's picks per token, layer and expert equal the oracle's,
//     and no layer's picks are NA;
//   - every weight's device is the model's mapping (CPU_Mapped), read
//     from the file, however its graph's inputs were placed;
//   - each tensor's device bytes are the disk's completions of its
//     sectors, byte for byte (testkit/blocktrace).
func TestRecordDriverMappedBuffersKeepPicksDevicesAndBytes(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	oracle := llmtest.BuildRouteOracle(t)
	alloc := llmtest.BuildDriverAlloc(t)
	spec := archSpec(gguf.ArchLlama)
	model := llmtest.Quantized(t, llmtest.Model(t, spec), "Q4_K_M")
	md := openModelDisk(t, model)
	loop := loopDevice(t, 256<<20)
	// In tmpfs: a file on the model's disk would be written back to it,
	// block requests of the run's own that are no model's.
	files, err := os.MkdirTemp("/dev/shm", "iocorr-driverfiles-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(files) })
	for _, tc := range []struct {
		name, kinds string
	}{
		{"a memfd", "memfd"},
		{"a device node", "dev:" + loop},
		{"shared /dev/zero", "zero"},
		{"a regular file that is no model", "file:" + files},
		// ggml allocates two large buffers here, the KV cache first.
		{"the kv cache in a memfd, the compute buffer in a device node", "memfd,dev:" + loop},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			args := append([]string{"env", "LD_PRELOAD=" + alloc, "DRIVERALLOC=" + tc.kinds}, llmtest.RouteOracleArgs(oracle, model, archTokens, true)...)
			ct := md.trace(t)
			rec, routing, m := recordOracle(t, dir, archMemLimit, spec, args...)
			ct.Stop(t)
			for _, k := range strings.Split(tc.kinds, ",") {
				if !strings.Contains(rec.Stderr, "driveralloc: "+k+" ") {
					t.Fatalf("no buffer was placed in %s: the run shows nothing\n%s", k, rec.Stderr)
				}
			}
			// Warnings of the disk's own (a request whose completion the
			// run's end cut off) are not this test's: none may name the
			// driver's mappings, their files, or the layout's validation.
			for _, w := range m.Warnings {
				for _, about := range []string{"memfd", loop, "/dev/zero", files, "validation", "resolving", "deleted while mapped", "graph nodes"} {
					if strings.Contains(w, about) {
						t.Errorf("a warning about %q: %s", about, w)
					}
				}
			}
			if m.Layout == nil || m.Layout.Invalid != "" || !strings.HasSuffix(m.Layout.Source, "(validated)") {
				t.Fatalf("layout %+v: want it validated", m.Layout)
			}
			if n := m.Layout.Nodes; n == nil || n.Checked == 0 || n.Failed != 0 {
				t.Errorf("graph nodes checked and failed: %+v; want some checked, none failed", n)
			}
			st := openExactPicks(t, dir, m, routing)
			defer st.Close()
			if _, picks := rectest.DecodePicks(t, st); picks != (archTokens-1)*spec.Layers*spec.ExpertsUsed {
				t.Errorf("%d distinct decode picks, want %d", picks, (archTokens-1)*spec.Layers*spec.ExpertsUsed)
			}
			var graphs, decodes int
			spooltest.Events(t, dir, func(typ uint16, _ []byte) {
				switch uint32(typ) {
				case uint32(wire.EventTypeEV_GRAPH):
					graphs++
				case uint32(wire.EventTypeEV_DECODE_BEGIN):
					decodes++
				}
			})
			if decodes != archTokens || graphs < decodes {
				t.Errorf("%d graphs for %d llama_decode calls: want a graph per call of %d", graphs, decodes, archTokens)
			}
			for _, tn := range st.Tensors {
				if !tn.Pseudo() && (tn.Device != "CPU_Mapped" || tn.NotFileBacked || tn.Copied) {
					t.Errorf("%s: device %q, not file-backed %v, copied %v; want the model's mapping", tn.Name, tn.Device, tn.NotFileBacked, tn.Copied)
				}
			}
			ours, theirs := md.checkTensorBytes(t, st, ct)
			t.Logf("%s: %d graphs, %d nodes checked; the model's device bytes: iocorr %d, the completions %d", tc.kinds, graphs, m.Layout.Nodes.Checked, ours, theirs)
		})
	}
}

// openExactPicks opens the run in dir and holds its picks to the oracle's
// routing: none NA, by meta.json or by the store, and the store's per
// token, layer and expert equal to the oracle's.
func openExactPicks(t *testing.T, dir string, m *rundir.Meta, routing llmtest.Routing) *store.Store {
	t.Helper()
	if why := m.PicksNA(); why != "" {
		t.Errorf("picks NA: %s", why)
	}
	st, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if why := st.Summary.PicksNA(); why != "" {
		t.Errorf("picks NA: %s", why)
	}
	checkStoredPicks(t, st, routing)
	return st
}

// loopDevice attaches a loop block device of size bytes, backed by a
// sparse file in tmpfs, for the test's life: a device node a process can
// map MAP_SHARED, as a GPU driver's are.
func loopDevice(t *testing.T, size int64) string {
	t.Helper()
	f, err := os.CreateTemp("/dev/shm", "iocorr-loop-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("losetup", "--find", "--show", f.Name()).Output()
	if err != nil {
		t.Fatalf("losetup --find --show %s: %v", f.Name(), err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v\n%s", dev, err, out)
		}
	})
	return dev
}

// TestRecordHybridOffloadWithDriverMappedHostBuffers is the hybrid run of
// TestRecordHybridOffloadPicksWhatLlamaCppRouted (every layer on
// lavapipe's Vulkan device, the experts mapped on the CPU, cold under
// llmtest.HybridMemLimit) with the process's large host buffers in
// memfds, as the NVIDIA driver gives them: lavapipe's host memory is anonymous, so this is
// the lab's nearest to a real driver's hybrid run. The layout validates,
// the picks equal the oracle's, the devices are llama.cpp's buffers per
// tensor and per layer (CPU_Mapped and Vulkan0) with the copied weights'
// reads the load's, and the device bytes are the completions'.
func TestRecordHybridOffloadWithDriverMappedHostBuffers(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	hy := llmtest.HybridDir(t)
	oracle := llmtest.BuildRouteOracle(t)
	alloc := llmtest.BuildDriverAlloc(t)
	spec := llmtest.MoE
	model := llmtest.Model(t, spec)
	md := openModelDisk(t, model)
	llmtest.SetHybridEnv(t)
	t.Setenv("LD_LIBRARY_PATH", hy)
	args := append(llmtest.RouteOracleArgs(oracle, model, archTokens, true), "--backends", hy)
	args = append(args, llmtest.HybridArgs(-1)...)
	llmtest.WarmShaderCache(t, "routeoracle-"+strings.Join(llmtest.HybridArgs(-1), ""), args, "LD_LIBRARY_PATH="+hy)
	dir := filepath.Join(t.TempDir(), "run")
	ct := md.trace(t)
	rec, routing, m := recordOracle(t, dir, llmtest.HybridMemLimit, spec, append([]string{"env", "LD_PRELOAD=" + alloc, "DRIVERALLOC=memfd"}, args...)...)
	ct.Stop(t)
	if !strings.Contains(rec.Stderr, "driveralloc: memfd ") {
		t.Fatalf("no buffer was placed in a memfd\n%s", rec.Stderr)
	}
	if m.Layout == nil || m.Layout.Invalid != "" || m.Layout.Nodes == nil || m.Layout.Nodes.Failed != 0 {
		t.Fatalf("layout %+v: want it validated, no node failed", m.Layout)
	}
	st := openExactPicks(t, dir, m, routing)
	defer st.Close()
	checkDevices(t, st, rec.Stderr, 0)
	checkLayerDevices(t, st, 0)
	checkLoadReads(t, st)
	ours, theirs := md.checkTensorBytes(t, st, ct)
	t.Logf("hybrid with memfd host buffers: %d nodes checked; the model's device bytes: iocorr %d, the completions %d", m.Layout.Nodes.Checked, ours, theirs)
}
