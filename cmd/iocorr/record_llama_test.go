package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/rundir"
)

// recordLlama records the Node driver generating tokens on a model and
// returns the run directory and the driver's own report.
func recordLlama(t *testing.T, model string, tokens int, extra ...string) (string, map[string]any, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	cmd := llmtest.Command(context.Background(), model, llmtest.Options{Tokens: tokens, Threads: 2, JSON: true})
	args := append([]string{"record", "-o", dir, "--no-ingest"}, extra...)
	args = append(append(args, "--"), cmd.Args...)
	out, errOut, err := runCmd(t, args...)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, errOut)
	}
	var report map[string]any
	if i := strings.LastIndex(strings.TrimSpace(out), "\n{"); i >= 0 {
		out = out[i+1:]
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &report); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	return dir, report, errOut
}

// spoolEvents calls fn for every record of a run's spool.
func spoolEvents(t *testing.T, dir string, fn func(typ uint16, rec []byte)) {
	t.Helper()
	r, err := ingest.OpenSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		fn(ingest.RecordType(rec), rec)
	}
	if st := r.Stats(); st.BadFrames != 0 || st.TornTail != 0 {
		t.Fatalf("spool damaged: %+v", st)
	}
}

// decoded decodes a whole spool record, as every reader of records does.
func decoded(t *testing.T, rec []byte) ingest.Record {
	t.Helper()
	var st ingest.DecodeStats
	d, ok := ingest.Decode(rec, &st)
	if !ok {
		t.Fatalf("a spool record that does not decode: %+v", st)
	}
	return d
}

func TestRecordLlamaSeesEveryDecodeCallWithItsPhaseAndRealWeights(t *testing.T) {
	requireBPF(t)
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
			var extra []string
			if tc.ops {
				extra = append(extra, "--probe", "ops")
			}
			dir, report, summary := recordLlama(t, model, tokens, extra...)
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			for typ, n := range m.Lost {
				if n != 0 {
					t.Errorf("lost %d %s events", n, typ)
				}
			}
			f, err := gguf.Open(model)
			if err != nil {
				t.Fatal(err)
			}
			var prefill, decode, ops, experts int
			var lastToken uint32
			weights := map[string]bool{}
			spoolEvents(t, dir, func(typ uint16, rec []byte) {
				switch uint32(typ) {
				case uint32(bpf.IocorrEventTypeEV_DECODE_BEGIN):
					e := decoded(t, rec).Decode()
					if e.Hdr.Token != lastToken+1 {
						t.Errorf("decode call numbered %d after %d", e.Hdr.Token, lastToken)
					}
					lastToken = e.Hdr.Token
					wantPhase := uint8(bpf.IocorrPhasePHASE_DECODE)
					if e.N_tokens > 1 {
						wantPhase = uint8(bpf.IocorrPhasePHASE_PREFILL)
						prefill++
					} else {
						decode++
					}
					if e.Hdr.Phase != wantPhase {
						t.Errorf("decode call %d of %d tokens has phase %d", e.Hdr.Token, e.N_tokens, e.Hdr.Phase)
					}
				case uint32(bpf.IocorrEventTypeEV_NODE):
					// The weight's bytes are where the GGUF says they are.
					checkWeightOffset(t, f, decoded(t, rec).Node(), weights)
				case uint32(bpf.IocorrEventTypeEV_OP):
					ops++
				case uint32(bpf.IocorrEventTypeEV_EXPERTS):
					e := decoded(t, rec).Experts()
					for _, id := range e.Ids[:e.Count] {
						if id < 0 || int(id) >= tc.spec.Experts {
							t.Errorf("expert id %d out of range", id)
						}
					}
					experts++
				}
			})
			wantCalls := int(report["decode_calls_expected"].(float64))
			if prefill+decode != wantCalls || prefill != int(report["prompt_batches"].(float64)) {
				t.Errorf("%d prefill + %d decode calls, driver expects %d (prompt batches %v)\n%s", prefill, decode, wantCalls, report["prompt_batches"], summary)
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

func TestRecordUnderMemoryPressureAgreesWithTheKernelsOwnCounters(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	// About 250 MB of weights under a 128 MiB limit (node itself needs
	// some 60 MB): every token re-reads much of the model from the disk.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 10, Embd: 1024, FF: 2816, Heads: 16, Type: llmtest.WeightType})
	dir, _, summary := recordLlama(t, model, 4, "--cold", "--mem-limit", "128MiB")
	t.Log(summary)
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	mf := m.Models[0]
	var major, majorModel, readBytes, readModel uint64
	spoolEvents(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(bpf.IocorrEventTypeEV_FAULT):
			e := decoded(t, rec).Fault()
			// All traced processes: wait4's rusage includes the command's
			// own waited-for children (node-llama-cpp spawns helpers).
			if e.Class == uint8(bpf.IocorrFaultClassFAULT_MAJOR) {
				major++
				if e.Ino == mf.Ino && e.Dev == mf.Dev {
					majorModel++
				}
			}
		case uint32(bpf.IocorrEventTypeEV_BLOCK):
			e := decoded(t, rec).Block()
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
	// Under this pressure nearly all of it is the model.
	if float64(readModel) < 0.5*float64(delta) {
		t.Errorf("only %d of %d bytes read were the model's", readModel, delta)
	}
	t.Logf("major faults %d (model %d, rusage %d); block read %d bytes (model %d), diskstats %d", major, majorModel, m.Child.MajFlt, readBytes, readModel, delta)
}

func absDiff(a, b uint64) uint64 {
	if a > b {
		return a - b
	}
	return b - a
}
