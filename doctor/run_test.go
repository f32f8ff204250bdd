package doctor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

func byName(checks []Check) map[string]Check {
	m := map[string]Check{}
	for _, c := range checks {
		m[c.Name] = c
	}
	return m
}

func TestRunPassesOnAMachineThatRecords(t *testing.T) {
	testenv.RequireBPF(t)
	checks := Run(Targets{})
	rows := byName(checks)
	if Failed(checks) {
		t.Fatalf("a required check failed on the machine the record tests pass on: %v", checks)
	}
	names := []string{"privileges", "kernel BTF", "uprobes", "tracefs", "BPF programs load and attach"}
	// This kernel (6.18, x86-64) has every capability's primary path.
	for _, c := range bpf.Capabilities {
		names = append(names, "capability "+c.Name)
	}
	for _, name := range names {
		if rows[name].Status != OK {
			t.Errorf("%s: %+v", name, rows[name])
		}
	}
	// --mem-limit works here (v1); one of the two must say so.
	if rows["memory cgroup v1"].Status != OK && rows["memory cgroup v2"].Status != OK {
		t.Errorf("no memory cgroup: %+v %+v", rows["memory cgroup v1"], rows["memory cgroup v2"])
	}
}

// Switching features off (as a kernel without them would be) shows the
// fallback taken, what it loses and why, or NA with its reason; a
// capability the run cannot do without fails.
func TestRunShowsEachCapabilitysPathOnThisKernel(t *testing.T) {
	testenv.RequireBPF(t)
	tests := []struct {
		without    string
		capability string
		want       Status
		detail     string
	}{
		{"page_fault_user", bpf.CapFaults, Fallback, "perf page-faults"},
		{"bpf_find_vma", bpf.CapOffsets, Fallback, "/proc/PID/maps"},
		{"bpf_find_vma", bpf.CapMappings, Fallback, "file from the fd"},
		{"uprobe_multi", bpf.CapOps, Fallback, "one uprobe per op function"},
		{"bpf_loop", bpf.CapLoops, Fallback, "bounded loops"},
		{"readahead", bpf.CapReadahead, Fallback, "page-cache adds inside each fault"},
		{"io_uring_submit_req", bpf.CapIOUring, Missing, "NA: io_uring reads are not traced"},
		{"syscalls", bpf.CapMappings, Fail, "required"},
	}
	for _, tc := range tests {
		t.Run(tc.without+" "+tc.capability, func(t *testing.T) {
			t.Setenv(bpf.WithoutEnv, tc.without)
			got := byName(Run(Targets{}))["capability "+tc.capability]
			if got.Status != tc.want || !strings.Contains(got.Detail, tc.detail) || !strings.Contains(got.Detail, tc.without) {
				t.Errorf("without %s: %+v, want status %s with %q and the feature named", tc.without, got, tc.want, tc.detail)
			}
		})
	}
}

func TestRunFindsTheProbeSymbolsOfACommand(t *testing.T) {
	testenv.RequireBPF(t)
	tests := []struct {
		name      string
		opt       Targets
		wantFound bool
		fails     bool
		wantRow   string
	}{
		{"node running a node-llama-cpp script: the addon's libraries and CPU variants",
			Targets{Command: []string{"node", llmtest.Driver()}}, true, false, "node-llama-cpp"},
		{"a --lib file, and the CPU backends dlopen()ed from beside it",
			Targets{Libs: []string{filepath.Join(llmtest.LibDir(), "libllama.v0.5.0.so")}, Command: []string{"true"}}, true, false, "symbols in libllama.v0.5.0.so"},
		{"a command without llama.cpp", Targets{Command: []string{"ls"}}, false, false, "probe point llama_decode"},
		{"a command that does not exist fails", Targets{Command: []string{"no-such-command-iocorr"}}, false, true, "command no-such-command-iocorr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := llmtest.Installed(); err != nil && tc.wantFound {
				t.Fatalf("node-llama-cpp is not installed (make setup): %v", err)
			}
			checks := Run(tc.opt)
			rows := byName(checks)
			if Failed(checks) != tc.fails {
				t.Fatalf("failed = %v, want %v: %v", Failed(checks), tc.fails, checks)
			}
			if _, ok := rows[tc.wantRow]; !ok {
				t.Fatalf("no row %q in %v", tc.wantRow, rows)
			}
			if tc.fails {
				return
			}
			for _, sym := range []string{"llama_decode", "ggml_graph_compute", "ggml_compute_forward_get_rows"} {
				if got := rows["probe point "+sym].Status == OK; got != tc.wantFound {
					t.Errorf("probe %s: %+v", sym, rows["probe point "+sym])
				}
			}
			if tc.wantFound {
				cpu := false
				for name := range rows {
					cpu = cpu || strings.HasPrefix(name, "symbols in libggml-cpu-*.so")
				}
				if !cpu {
					t.Errorf("the CPU backend variants are not one row: %v", rows)
				}
			}
		})
	}
}
