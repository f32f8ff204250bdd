package doctor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/internal/testenv"
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
	checks := Run(Options{})
	rows := byName(checks)
	if Failed(checks) {
		t.Fatalf("a required check failed on the machine the record tests pass on: %v", checks)
	}
	for _, name := range []string{"privileges", "kernel BTF", "uprobes", "tracefs", "BPF programs load and attach",
		"tracepoint filemap/mm_filemap_add_to_page_cache", "tracepoint syscalls/sys_exit_mmap", "perf page-faults-major"} {
		if rows[name].Status != OK {
			t.Errorf("%s: %+v", name, rows[name])
		}
	}
	// --mem-limit works here (v1); one of the two must say so.
	if rows["memory cgroup v1"].Status != OK && rows["memory cgroup v2"].Status != OK {
		t.Errorf("no memory cgroup: %+v %+v", rows["memory cgroup v1"], rows["memory cgroup v2"])
	}
}

func TestRunFindsTheProbeSymbolsOfACommand(t *testing.T) {
	testenv.RequireBPF(t)
	tests := []struct {
		name      string
		opt       Options
		wantFound bool
		fails     bool
		wantRow   string
	}{
		{"node running a node-llama-cpp script: the addon's libraries and CPU variants",
			Options{Command: []string{"node", llmtest.Driver()}}, true, false, "node-llama-cpp"},
		{"a --lib file, and the CPU backends dlopen()ed from beside it",
			Options{Libs: []string{filepath.Join(llmtest.LibDir(), "libllama.v0.5.0.so")}, Command: []string{"true"}}, true, false, "symbols in libllama.v0.5.0.so"},
		{"a command without llama.cpp", Options{Command: []string{"ls"}}, false, false, "probe point llama_decode"},
		{"a command that does not exist fails", Options{Command: []string{"no-such-command-iocorr"}}, false, true, "command no-such-command-iocorr"},
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
