package recorder

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// The tests of this file record real commands with Run as `iocorr record
// --no-ingest` does, and check the run directory it leaves: meta.json and
// the event spool.

// cliOptions are the options `iocorr record -o dir -- argv` gives Run
// (the default ring buffer size); the command's and the recorder's
// output go to the returned buffer.
func cliOptions(dir string, argv ...string) (Options, *bytes.Buffer) {
	var out bytes.Buffer
	o := Options{Dir: dir, Argv: argv, RingBufBytes: bpf.DefaultRingBufBytes, Stdout: &out, Stderr: &out}
	return o, &out
}

// recordDriver records llama.cpp's driver generating on model with the
// options `iocorr record` gives Run, changed by set, and returns the run
// directory, the driver's report and what the recorder said.
func recordDriver(t *testing.T, model string, g llmtest.Generation, set func(o *Options)) (string, llmtest.Result, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	g.JSON = true
	o, errOut := cliOptions(dir, llmtest.Command(t.Context(), model, g).Args...)
	var out bytes.Buffer
	o.Stdout = &out
	set(&o)
	if _, err := Run(t.Context(), o); err != nil {
		t.Fatalf("record: %v\n%s", err, errOut)
	}
	report, err := llmtest.ParseResult(out.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	return dir, report, errOut.String()
}

// mapFileEnv makes the test binary a command that maps the file it names
// and reads its first page (TestHelperProcessMap).
const mapFileEnv = "IOCORR_TEST_MAP_FILE"

// TestHelperProcessMap is not a test: with mapFileEnv set it maps that
// file, prints its first 4 bytes and exits.
func TestHelperProcessMap(t *testing.T) {
	p := os.Getenv(mapFileEnv)
	if p == "" {
		return
	}
	f, err := os.Open(p)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	st, _ := f.Stat()
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("%q\n", mem[:4])
	// Alive a little longer: the recorder reads /proc/PID/maps once it
	// has seen the mmap, and an exited process has none.
	time.Sleep(300 * time.Millisecond)
	os.Exit(0)
}

func TestRunOnAFullDiskLeavesAReadableIncompleteRun(t *testing.T) {
	testenv.RequireBPF(t)
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatalf("mounting a small tmpfs: %v", err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	dir := filepath.Join(mnt, "run")
	// dd touches its 32 MiB buffer page by page: thousands of fault
	// records, far more than 64 KiB, once its anonymous faults are
	// recorded one by one rather than counted in the kernel.
	o, errOut := cliOptions(dir, "dd", "if=/dev/zero", "of=/dev/null", "bs=32M", "count=2")
	o.Probes.Faults = true
	_, err := Run(t.Context(), o)
	if err == nil || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want no space left on device\n%s", err, errOut)
	}
	m, rerr := rundir.ReadMeta(dir)
	if rerr != nil {
		t.Fatalf("no readable metadata after the disk filled: %v", rerr)
	}
	warnings := strings.Join(m.Warnings, "\n")
	if m.Complete || !strings.Contains(warnings, "no space left") || m.Child.ExitCode != 0 || m.Child.MinFlt == 0 || m.End.IsZero() {
		t.Fatalf("complete %v, child %+v, warnings %q", m.Complete, m.Child, m.Warnings)
	}
	n := 0
	spooltest.EventsLoose(t, dir, func(uint16, []byte) { n++ })
	if n == 0 {
		t.Fatal("nothing readable in the spool")
	}
	if _, err := os.Stat(filepath.Join(dir, ".meta-reserve")); err == nil {
		t.Error("the metadata reserve was left behind")
	}
	t.Logf("%d records kept; %v", n, err)
}

func TestRunColdUnderAMemoryLimit(t *testing.T) {
	testenv.RequireBPF(t)
	// About 50 MB of weights read through a 16 MiB cgroup.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 1024, FF: 2816, Heads: 8, Type: llmtest.WeightType})
	dir := filepath.Join(t.TempDir(), "run")
	o, errOut := cliOptions(dir, "dd", "if="+model, "of=/dev/null", "bs=1M")
	o.Models, o.Cold, o.MemLimit, o.Probes.PageCache = []string{model}, true, 16<<20, true
	if _, err := Run(t.Context(), o); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Models) != 1 {
		t.Fatalf("%d models", len(m.Models))
	}
	mf := m.Models[0]
	if mf.ResidentBefore != 0 || len(mf.Tensors) == 0 || len(mf.Extents) == 0 || mf.Block.DiskDev == 0 {
		t.Fatalf("model %s: resident before %d, %d tensors, %d extents, block %+v", mf.Path, mf.ResidentBefore, len(mf.Tensors), len(mf.Extents), mf.Block)
	}
	c := m.Controls
	if c.Cgroup == "" || c.MemLimit != 16<<20 || c.CgroupCounters == nil {
		t.Fatalf("controls %+v", c)
	}
	if _, err := os.Stat(c.Cgroup); !os.IsNotExist(err) {
		t.Errorf("cgroup %s left behind", c.Cgroup)
	}
	if peak := c.CgroupCounters["memory.max_usage_in_bytes"] + c.CgroupCounters["memory.peak"]; peak == 0 || peak > 16<<20 {
		t.Errorf("cgroup peak %d for a 16 MiB limit", peak)
	}
	// Every page of the model came into the page cache under the eyes of
	// the tracer, and off the disk.
	var added, readModel uint64
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_PAGE_RUN):
			e := spooltest.Decoded(t, rec).PageRun()
			if e.Ino == mf.Ino && e.Dev == mf.Dev && e.Kind == uint16(wire.EventTypeEV_PAGE_ADD) {
				added += uint64(e.NrPages)
			}
		case uint32(wire.EventTypeEV_BLOCK):
			e := spooltest.Decoded(t, rec).Block()
			if e.Dev != mf.Block.DiskDev || kernel.BlockOpOf(e.CmdFlags) != kernel.BlockRead {
				return
			}
			start := (e.Sector - mf.Block.PartStartSector) * 512
			for _, x := range mf.Extents {
				if lo, hi := max(start, x.Physical), min(start+uint64(e.Bytes), x.Physical+x.Length); lo < hi {
					readModel += hi - lo
				}
			}
		}
	})
	if added < uint64(mf.Pages) || readModel < uint64(mf.Size)&^4095 {
		t.Fatalf("%d pages added of %d, %d bytes read of %d", added, mf.Pages, readModel, mf.Size)
	}
	t.Logf("%d pages added for a %d-page model, %d bytes of it read; cgroup %v", added, mf.Pages, readModel, c.CgroupCounters)
}

func TestRunFindsAModelTheCommandMapsAndSaysItWasLate(t *testing.T) {
	testenv.RequireBPF(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 1, Embd: 256, FF: 512, Heads: 4, Type: llmtest.WeightType})
	t.Setenv(mapFileEnv, model) // not on the command line
	dir := filepath.Join(t.TempDir(), "run")
	o, errOut := cliOptions(dir, os.Args[0], "-test.run=^TestHelperProcessMap$")
	var out bytes.Buffer
	o.Stdout = &out
	if _, err := Run(t.Context(), o); err != nil || !strings.Contains(out.String(), "GGUF") {
		t.Fatalf("%v: %s\n%s", err, &out, errOut)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Models) != 1 || m.Models[0].Path != model || len(m.Models[0].Tensors) == 0 {
		t.Fatalf("models %+v", m.Models)
	}
	if !strings.Contains(strings.Join(m.Warnings, "\n"), "became known only when it was mapped") {
		t.Errorf("warnings %q", m.Warnings)
	}
	if len(m.Maps) != 1 {
		t.Fatalf("maps snapshots %+v", m.Maps)
	}
	b, err := os.ReadFile(filepath.Join(dir, m.Maps[0].File))
	if err != nil || !strings.Contains(string(b), model) {
		t.Fatalf("maps snapshot %s does not show the model: %v\n%s", m.Maps[0].File, err, b)
	}
}

func TestRunLlamaSeesEveryDecodeCallWithItsPhaseAndRealWeights(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	tests := []struct {
		name string
		spec gguf.SynthSpec
		ops  bool
	}{
		{"dense bf16, graph probes", gguf.SynthSpec{Layers: 4, Embd: 256, FF: 512, Heads: 4, Type: llmtest.WeightType}, false},
		{"moe bf16, op probes", gguf.SynthSpec{Layers: 3, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			model := llmtest.Model(t, tc.spec)
			const tokens = 6
			dir, report, summary := recordDriver(t, model, llmtest.Generation{Tokens: tokens, Threads: 2}, func(o *Options) { o.Probes.Ops = tc.ops })
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			spooltest.CheckNothingLost(t, m.Lost)
			f, err := gguf.Open(model)
			if err != nil {
				t.Fatal(err)
			}
			var prefill, decode, ops, experts int
			var lastToken uint32
			weights := map[string]bool{}
			spooltest.Events(t, dir, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(wire.EventTypeEV_DECODE_BEGIN):
					e := spooltest.Decoded(t, rec).Decode()
					if e.Hdr.Token != lastToken+1 {
						t.Errorf("decode call numbered %d after %d", e.Hdr.Token, lastToken)
					}
					lastToken = e.Hdr.Token
					wantPhase := uint8(wire.PhasePHASE_DECODE)
					if e.N_tokens > 1 {
						wantPhase = uint8(wire.PhasePHASE_PREFILL)
						prefill++
					} else {
						decode++
					}
					if e.Hdr.Phase != wantPhase {
						t.Errorf("decode call %d of %d tokens has phase %d", e.Hdr.Token, e.N_tokens, e.Hdr.Phase)
					}
				case uint32(wire.EventTypeEV_NODE):
					// The weight's bytes are where the GGUF says they are.
					spooltest.CheckWeightOffset(t, f, spooltest.Decoded(t, rec).Node(), weights)
				case uint32(wire.EventTypeEV_OP):
					ops++
				case uint32(wire.EventTypeEV_EXPERTS):
					e := spooltest.Decoded(t, rec).Experts()
					for _, id := range e.Ids[:e.Count] {
						if id < 0 || int(id) >= tc.spec.Experts {
							t.Errorf("expert id %d out of range", id)
						}
					}
					experts++
				}
			})
			wantCalls := report.DecodeCallsExpected
			if prefill+decode != wantCalls || prefill != report.PromptBatches {
				t.Errorf("%d prefill + %d decode calls, driver expects %d (prompt batches %v)\n%s", prefill, decode, wantCalls, report.PromptBatches, summary)
			}
			for _, tensor := range f.Tensors {
				if strings.HasSuffix(tensor.Name, "_norm.weight") || strings.HasPrefix(tensor.Name, "blk.") || tensor.Name == "output.weight" {
					if !weights[tensor.Name] {
						t.Errorf("no graph node reads %s", tensor.Name)
					}
				}
			}
			if tc.ops && ops == 0 {
				t.Error("op probes recorded no op")
			}
			if tc.spec.Experts > 0 && experts == 0 {
				t.Error("no expert selections recorded for a MoE model")
			}
			if !strings.Contains(m.Layout.Source, "validated") {
				t.Errorf("layout %q was not validated against the target", m.Layout.Source)
			}
		})
	}
}

func TestRunUnderMemoryPressureAgreesWithTheKernelsOwnCounters(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	// About 250 MB of weights under a 128 MiB limit (node itself needs
	// some 60 MB): every token re-reads much of the model from the disk.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 10, Embd: 1024, FF: 2816, Heads: 16, Type: llmtest.WeightType})
	dir, _, summary := recordDriver(t, model, llmtest.Generation{Tokens: 4, Threads: 2}, func(o *Options) { o.Cold, o.MemLimit = true, 128<<20 })
	t.Log(summary)
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	mf := m.Models[0]
	var major, majorModel, readBytes, readModel uint64
	// All traced processes: wait4's rusage includes the command's own
	// waited-for children (node-llama-cpp spawns helpers). Faults outside
	// the model files come as the kernel's counts.
	spooltest.Faults(t, dir, func(_ *wire.EventHdr, class uint8, n uint64, e *wire.FaultEvent) {
		if class == uint8(wire.FaultClassFAULT_MAJOR) {
			major += n
			if e != nil && e.Ino == mf.Ino && e.Dev == mf.Dev {
				majorModel++
			}
		}
	})
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_BLOCK):
			e := spooltest.Decoded(t, rec).Block()
			if e.Dev != mf.Block.DiskDev || kernel.BlockOpOf(e.CmdFlags) != kernel.BlockRead {
				return
			}
			// diskstats adds a request's sectors when it completes, and
			// was read just before MonoStartNS and just after MonoEndNS;
			// the tracer also saw iocorr's own reads while it set up.
			if e.Hdr.Ts < m.MonoStartNS || e.Hdr.Ts > m.MonoEndNS {
				return
			}
			readBytes += uint64(e.Bytes)
			start := (e.Sector - mf.Block.PartStartSector) * 512
			for _, x := range mf.Extents {
				lo, hi := max(start, x.Physical), min(start+uint64(e.Bytes), x.Physical+x.Length)
				if lo < hi {
					readModel += hi - lo
				}
			}
		}
	})
	// The child's majflt counts every major fault of the process from its
	// fork on (its libraries' pages are evicted too under the limit, and
	// rusage survives execve, so the launcher's exec of iocorr and its Go
	// runtime count too). The tracer follows the child from the fork
	// itself (launch.StartHeld arms it with the forking thread), so
	// the recorded faults are the same set, each seen by the same
	// accounting (mm_account_fault raises majflt and the perf event
	// together): the totals agree exactly. The model's share is what the
	// kernel resolved to the model's inode.
	if major != uint64(m.Child.MajFlt) {
		t.Errorf("recorded %d major faults, the child's rusage says %d", major, m.Child.MajFlt)
	}
	if majorModel == 0 || majorModel > major {
		t.Errorf("%d major faults in the model of %d", majorModel, major)
	}
	disk := blockdev.DiskName(mf.Block)
	var before, after uint64
	for _, d := range m.DiskBefore {
		if d.Name == disk {
			before = d.SectorsRead
		}
	}
	for _, d := range m.DiskAfter {
		if d.Name == disk {
			after = d.SectorsRead
		}
	}
	delta := (after - before) * 512
	// Every read on the device during the run was recorded (other
	// processes' reads included, as diskstats counts them too).
	if diff := absDiff(readBytes, delta); float64(diff) > 0.01*float64(delta) {
		t.Errorf("recorded %d bytes read on %s, diskstats says %d", readBytes, disk, delta)
	}
	// Each major fault in the model read at least its page from the
	// disk. (How much of the disk's reads were the model's depends on what
	// else reads it meanwhile: CI runs other packages' tests beside this
	// one, and 45% was seen; the model's bytes are held to the disk's own
	// completions of its sectors in blockexact_e2e_test.go.)
	if readModel < majorModel*uint64(kernel.PageSize) {
		t.Errorf("the model's %d major faults read %d bytes from the disk, under a page each", majorModel, readModel)
	}
	t.Logf("major faults %d (model %d, rusage %d); block read %d bytes (model %d), diskstats %d", major, majorModel, m.Child.MajFlt, readBytes, readModel, delta)
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}

// TestOpProbesGoOnlyOnTheCPUBackendThatRuns: node-llama-cpp loads every
// libggml-cpu variant and runs one. With --probe ops the op functions of
// exactly that one are probed (the one whose first graph stopped the
// process for the attach), no op of any graph is missed — every weight-
// reading node of every graph has its op — and with one compute thread
// the kernel's count of op-probe hits per token equals the op events of
// the token. meta.json carries the calibrated cost of a hit and the
// overhead estimates.
func TestOpProbesGoOnlyOnTheCPUBackendThatRuns(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 3, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType})
	dir, _, _ := recordDriver(t, model, llmtest.Generation{Tokens: 5, Threads: 1}, func(o *Options) { o.Probes.Ops = true })
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
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		d := spooltest.Decoded(t, rec)
		switch {
		case d.Node() != nil:
			n := d.Node()
			nodesOf[n.GraphId] = append(nodesOf[n.GraphId], n.Node)
			opOfNode[n.Node] = n.Op
			weightOf[n.Node] = wire.CString(n.WeightName[:])
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
			if e.Hdr.Type == uint16(wire.EventTypeEV_DECODE_BEGIN) {
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
	// The cost per hit is of functions that begin as the probed op
	// functions do: each of them is counted by its first instruction.
	if n := op.FirstInstruction["emulated"] + op.FirstInstruction["stepped"]; n == 0 || n > len(m.OpFuncs) {
		t.Errorf("op_probes counts %v op functions by first instruction, of %d probed", op.FirstInstruction, len(m.OpFuncs))
	}
	if op.PerHitNS <= 0 || op.CalibrationNA != "" || op.Tokens != 5 || op.HitsPerTokenMean <= 0 || op.OverheadRatio <= 0 ||
		op.BareMetalOverheadRatio[0] <= 0 || op.BareMetalOverheadRatio[1] < op.BareMetalOverheadRatio[0] {
		t.Errorf("op_probes %+v: want a measured cost per hit, hits per token and overhead estimates", *op)
	}
	t.Logf("op probes on %s (%d idle variants, first instructions %v): %.0f hits per token, %d ns per hit, overhead %.1f%% here, %.2f–%.2f%% on bare metal",
		filepath.Base(op.Files[0]), len(op.Idle), op.FirstInstruction, op.HitsPerTokenMean, op.PerHitNS, 100*op.OverheadRatio,
		100*op.BareMetalOverheadRatio[0], 100*op.BareMetalOverheadRatio[1])
}
