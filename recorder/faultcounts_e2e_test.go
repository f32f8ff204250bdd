package recorder_test

import (
	"github.com/iocorr/iocorr/testkit/storetest"
	"os"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/procmaps"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// node-llama-cpp faults mostly outside the model (its heap, the stacks of
// the threads it starts every graph): recorded one by one (--probe
// faults) or counted in the kernel (the default), every fault of the
// command is in the record once, as its own rusage counts them. (The
// model's pages are read in when it is mapped (MAP_POPULATE): in RAM it
// takes no fault; bpf's test checks that a model's faults stay records.)
func TestFaultsOutsideTheModelsAreInTheRecordAsTheCommandsRusageCountsThem(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	shared := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4, Type: llmtest.WeightType})
	// A copy of the test's own, read whole before each run: the shared
	// file is evicted now and then by another package's cold runs, and
	// MAP_POPULATE then reads it in through get_user_pages, whose major
	// faults rusage counts but no perf event does (one such fault failed
	// the equality below in CI).
	b, err := os.ReadFile(shared)
	if err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), filepath.Base(shared))
	if err := os.WriteFile(model, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		probe   string
		counted bool
	}{
		{"counted in the kernel (the default)", "", true},
		{"one by one (--probe faults)", "faults", false},
	}
	records := map[bool]uint64{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "run")
			if _, err := os.ReadFile(model); err != nil {
				t.Fatal(err)
			}
			out := rectest.Record(t, dir, rectest.Options{Probe: tc.probe}, llmtest.Command(t.Context(), model, llmtest.Generation{Tokens: 8, Threads: 2}).Args...)
			m, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			var tok event.Counters
			for _, tk := range storetest.Tokens(t, dir) {
				tok.Add(&tk.Counters)
			}
			outside := counterSums{}
			for _, r := range storetest.Query(t, dir, store.Query{By: "tensor", Pseudos: true}) {
				if r.Key == event.PseudoNames[event.TensorAnon] || r.Key == event.PseudoNames[event.TensorOther] {
					outside.add(&r.Counters)
				}
			}
			sum := out.Ingest
			records[tc.counted] = sum.ByType["fault"]
			t.Logf("tokens' faults: %d minor, %d major, %d unaccounted, stall %d ns; outside the models %d (stall %d ns); fault records %d, counts %d standing for %d faults; rusage minflt %d majflt %d",
				tok.Minor, tok.Major, tok.Unaccounted, tok.StallNS, outside["faults"], outside["fault_stall_ns"], sum.ByType["fault"], sum.ByType["fault_count"], sum.FaultsCounted, m.Child.MinFlt, m.Child.MajFlt)
			if (m.FaultsCounted != "") != tc.counted || (sum.FaultsCounted > 0) != tc.counted || (m.FaultDetailNA() != "") != tc.counted {
				t.Errorf("meta.json's faults_counted %q and %d faults counted; want them counted: %v", m.FaultsCounted, sum.FaultsCounted, tc.counted)
			}
			if tok.Major != uint64(m.Child.MajFlt) {
				t.Errorf("%d major faults in the record, the command's rusage says %d", tok.Major, m.Child.MajFlt)
			}
			// rusage counts also the faults the kernel takes on the
			// command's behalf with no user fault (regs NULL: populating
			// a MAP_POPULATE mapping, execve's arguments), which no perf
			// fault event counts, in either mode.
			if tok.Minor > uint64(m.Child.MinFlt) || float64(uint64(m.Child.MinFlt)-tok.Minor) > 0.01*float64(m.Child.MinFlt) {
				t.Errorf("%d minor faults in the record, the command's rusage says %d: want at most that, and within 1%%", tok.Minor, m.Child.MinFlt)
			}
			var noStart, inFiles, inModel, busy, byMaps uint64 // records
			mf := m.Models[0]
			modelMaps := modelMappings(t, dir, m, mf)
			spooltest.Events(t, dir, func(typ uint16, rec []byte) {
				if uint32(typ) != uint32(wire.EventTypeEV_FAULT) {
					return
				}
				f := spooltest.Decoded(t, rec).Fault()
				counted := f.Class != uint8(wire.FaultClassFAULT_UNACCOUNTED)
				switch {
				case f.Ino == 0 && (f.StartTs == 0 || f.VmaBusy != 0):
					// Taken in kernel mode (no start), or the kernel
					// found the mmap lock held: the correlator resolves
					// these by the process's mappings, and so does this.
					if f.StartTs == 0 {
						noStart++
					} else {
						busy++
					}
					if counted && modelMaps.holds(f.Hdr.Tgid, f.Addr, f.Hdr.Ts) {
						inModel++
						byMaps++
					}
				case f.Ino == mf.Ino && f.Dev == mf.Dev:
					if counted {
						inModel++
					}
				case f.Ino != 0:
					inFiles++
				}
			})
			t.Logf("fault records: in the model %d (%d of them placed by the maps), in other files %d, without a start (taken in kernel mode) %d, with the mmap lock held %d", inModel, byMaps, inFiles, noStart, busy)
			if model := tok.Faults - outside["faults"]; model != inModel {
				t.Errorf("%d faults charged to the model's tensors, %d records in the model: want equal", model, inModel)
			}
		})
	}
	// What stays a record: faults before the recorder decided a file
	// (between its mmap and the recorder reading that record), and faults
	// taken in kernel mode in a mapping the kernel's VMA cache has not met.
	if records[true] == 0 || records[true]*10 > records[false] {
		t.Errorf("%d fault records counted in the kernel, %d one by one: want at most a tenth", records[true], records[false])
	}
}

// mapping is one of the model's mappings in a run's /proc/PID/maps
// snapshot, from the snapshot's time.
type mapping struct {
	pid        uint32
	since      uint64
	start, end uint64
}

type mappings []mapping

func (ms mappings) holds(pid uint32, addr, ts uint64) bool {
	for _, m := range ms {
		if m.pid == pid && m.since <= ts && m.start <= addr && addr < m.end {
			return true
		}
	}
	return false
}

// modelMappings reads the run's maps snapshots for mf's mappings: the
// independent resolution of the fault records the kernel left unresolved.
func modelMappings(t *testing.T, dir string, m *rundir.Meta, mf rundir.ModelFile) mappings {
	t.Helper()
	var out mappings
	for _, s := range m.Maps {
		f, err := os.Open(filepath.Join(dir, s.File))
		if err != nil {
			t.Fatal(err)
		}
		ms, err := procmaps.Parse(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ms {
			if x.Inode == mf.Ino && kernel.Dev(x.Major, x.Minor) == mf.Dev {
				out = append(out, mapping{uint32(s.PID), s.MonoNS, x.Start, x.End})
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("no maps snapshot of %d maps the model", len(m.Maps))
	}
	return out
}
