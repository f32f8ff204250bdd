package rundir

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/kernel"
)

func fullMeta() Meta {
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	return Meta{
		Version: "v1.2.3", Command: []string{"llama-cli", "-m", "m.gguf"}, Start: t0, End: t0.Add(time.Minute),
		MonoStartNS: 1, MonoEndNS: 60e9 + 1,
		Host:     Host{Hostname: "h", Kernel: "6.18", CPUModel: "cpu", NumCPU: 2, MemTotal: 1 << 30, PageSize: 4096},
		ProbeSet: "ops",
		Probes:   []Probe{{Kind: "uprobe", Target: "/lib/libllama.so", Symbol: "llama_decode"}, {Kind: "tracepoint", Target: "block/block_rq_issue", Error: "no"}},
		Layout:   &Layout{Source: "dwarf:/lib/libggml.so", Tensor: map[string]int{"data": 248}, Graph: map[string]int{"nodes": 16}},
		OpNames:  []string{"NONE", "DUP"}, OpFuncs: []string{"", "ggml_compute_forward_mul_mat"},
		Libraries: []Library{{Path: "/lib/libllama.so", BuildID: "abcd", Size: 10}, {Path: "/x.so", BuildIDError: "bad ELF", Size: 3}},
		GoVersion: "go1.24",
		Models: []ModelFile{{
			Path: "/m.gguf", Dev: kernel.Dev(254, 0), Ino: 7, Size: 8192, DataOffset: 4096,
			Tensors: []Tensor{{Name: "blk.0.ffn_up_exps.weight", Type: "BF16", Shape: []uint64{4, 8, 2}, Offset: 4096, Size: 128, Layer: 0, Role: "ffn_up_exps", Experts: 2, ExpertStride: 64}},
			Block:   BlockDevice{Name: "vda", Dev: kernel.Dev(254, 0), DiskDev: kernel.Dev(254, 0), LogicalBlock: 512},
			Extents: []Extent{{Logical: 0, Physical: 1 << 20, Length: 8192, Flags: 1}}, ResidentBefore: 1, Pages: 2,
		}},
		Maps:     []MapsSnapshot{{MonoNS: 5, PID: 42, File: "maps/0001-42.txt"}},
		Child:    Child{PID: 42, ExitCode: 137, Signal: "SIGKILL", UID: 1000, GID: 1000, MajFlt: 3, MinFlt: 4, InBlock: 5, OutBlock: 6, MaxRSSKiB: 7, UserNS: 8, SystemNS: 9},
		Recorder: &Recorder{MaxRSSKiB: 10, UserNS: 11, SystemNS: 12, BeforeNS: 13, WhileNS: 14},
		Controls: Controls{Cold: true, DropCaches: true, MemLimit: 1 << 27, Cgroup: "/sys/fs/cgroup/memory/x", CgroupVer: 1,
			CgroupCounters: map[string]uint64{"memory.failcnt": 2}},
		DiskBefore: []DiskStat{{Name: "vda", Major: 254, Reads: 1}}, DiskAfter: []DiskStat{{Name: "vda", Major: 254, Reads: 2}},
		Counts: map[string]uint64{"fault": 3}, BlockIncomplete: 1, Lost: map[string]uint64{"page_add": 0},
		Complete: false, Finished: true, Warnings: []string{"the command was killed by SIGKILL"},
	}
}

func TestMetaRoundTripsThroughWriteAndRead(t *testing.T) {
	dir := t.TempDir()
	want := fullMeta()
	if err := WriteMeta(dir, &want); err != nil {
		t.Fatal(err)
	}
	if want.FormatVersion != FormatVersion {
		t.Errorf("WriteMeta set format %d, want %d", want.FormatVersion, FormatVersion)
	}
	got, err := ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, want) {
		a, _ := json.MarshalIndent(got, "", " ")
		b, _ := json.MarshalIndent(want, "", " ")
		t.Errorf("read back\n%s\nwrote\n%s", a, b)
	}
	// Every field is written: a zero Meta has them all too.
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{`"finished": true`, `"complete": false`, `"lost"`, `"models"`, `"format_version": 2`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("meta.json lacks %s", key)
		}
	}
}

func TestWriteMetaLeavesTheOldVersionWhenTheNewOneIsNotComplete(t *testing.T) {
	dir := t.TempDir()
	old := fullMeta()
	if err := WriteMeta(dir, &old); err != nil {
		t.Fatal(err)
	}
	// A writer killed while writing leaves its temporary file half
	// written; meta.json itself is untouched until the rename.
	if err := os.WriteFile(atomicfile.TempName(filepath.Join(dir, MetaFile)), []byte(`{"format_version": 2, "comm`), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, old) {
		t.Errorf("after a torn temporary file, meta.json reads %+v", got)
	}
	// The next write replaces both.
	next := fullMeta()
	next.Warnings = nil
	if err := WriteMeta(dir, &next); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadMeta(dir); err != nil || got.Warnings != nil {
		t.Errorf("after a new write: %v, warnings %q", err, got.Warnings)
	}
	if _, err := os.Stat(atomicfile.TempName(filepath.Join(dir, MetaFile))); !os.IsNotExist(err) {
		t.Errorf("temporary file left: %v", err)
	}
}

func TestReadMetaSaysWhatIsWrong(t *testing.T) {
	tests := []struct {
		name, content, want string
	}{
		{"no meta.json", "", "is not a run directory"},
		{"newer format", `{"format_version": 99}`, "written by a newer iocorr (format 99, this one reads up to 2)"},
		{"not JSON", `{"format_version": `, "parsing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != "" {
				if err := os.WriteFile(filepath.Join(dir, MetaFile), []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := ReadMeta(dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("err = %v, want one line with %q", err, tc.want)
			}
		})
	}
}

func TestFormat1RunsSayWhetherTheirRecorderFinished(t *testing.T) {
	tests := []struct {
		name     string
		meta     string
		finished bool
	}{
		// Format 1 wrote this first and replaced it at an orderly end.
		{"recorder died", `{"format_version": 1, "warnings": ["recording did not finish"]}`, false},
		{"orderly end, complete", `{"format_version": 1, "complete": true}`, true},
		{"orderly end, command crashed", `{"format_version": 1, "warnings": ["the command was killed by SIGSEGV"]}`, true},
		{"no version at all", `{"complete": true}`, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, MetaFile), []byte(tc.meta), 0o644); err != nil {
				t.Fatal(err)
			}
			m, err := ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m.Finished != tc.finished {
				t.Errorf("finished %v, want %v", m.Finished, tc.finished)
			}
		})
	}
}

func TestStatusSaysWhyFiguresArePartial(t *testing.T) {
	tests := []struct {
		name string
		meta Meta
		want string
	}{
		{"finished and complete", Meta{Finished: true, Complete: true}, ""},
		{"recorder died", Meta{Finished: false}, "incomplete run: the recorder did not finish (killed?); figures cover what was recorded until it stopped"},
		{"recorder died before reading the kernel's fault counts", Meta{Finished: false, FaultsCounted: "anonymous memory"}, "incomplete run: the recorder did not finish (killed?); figures cover what was recorded until it stopped, and the faults outside the model files (anonymous memory), counted in the kernel and read at the end, are missing"},
		{"recorder died, complete is not believed", Meta{Finished: false, Complete: true}, "incomplete run: the recorder did not finish"},
		{"finished, stopped early", Meta{Finished: true, Warnings: []string{"no space left on device", "later"}}, "incomplete run: no space left on device (see meta.json warnings)"},
		{"finished, incomplete without a warning", Meta{Finished: true}, "incomplete run: recording stopped early (see meta.json warnings)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.meta.Status()
			if tc.want == "" && got != "" || !strings.HasPrefix(got, tc.want) {
				t.Errorf("Status() = %q, want %q", got, tc.want)
			}
		})
	}
}
