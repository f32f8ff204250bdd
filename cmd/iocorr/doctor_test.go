package main

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/internal/llmtest"
)

type doctorRow struct {
	Check, Status, Detail string
}

// doctorRows runs doctor with JSON output and returns its rows by check.
func doctorRows(t *testing.T, args ...string) (map[string]doctorRow, error) {
	t.Helper()
	out, _, err := runCmd(t, append([]string{"doctor", "--format", "json"}, args...)...)
	var rows []doctorRow
	if jerr := json.Unmarshal([]byte(out), &rows); jerr != nil {
		t.Fatalf("doctor output is not JSON: %v\n%s", jerr, out)
	}
	m := map[string]doctorRow{}
	for _, r := range rows {
		m[r.Check] = r
	}
	return m, err
}

func TestDoctorPassesOnAMachineThatRecords(t *testing.T) {
	requireBPF(t)
	rows, err := doctorRows(t)
	if err != nil {
		t.Fatalf("doctor failed on the machine the record tests pass on: %v\n%v", err, rows)
	}
	for _, name := range []string{"privileges", "kernel BTF", "uprobes", "tracefs", "BPF programs load and attach",
		"tracepoint filemap/mm_filemap_add_to_page_cache", "tracepoint syscalls/sys_exit_mmap", "perf page-faults-major"} {
		if rows[name].Status != "ok" {
			t.Errorf("%s: %+v", name, rows[name])
		}
	}
	// --mem-limit works here (v1); one of the two must say so.
	if rows["memory cgroup v1"].Status != "ok" && rows["memory cgroup v2"].Status != "ok" {
		t.Errorf("no memory cgroup: %+v %+v", rows["memory cgroup v1"], rows["memory cgroup v2"])
	}
	out, _, _ := runCmd(t, "doctor")
	if !strings.Contains(out, "✓") {
		t.Errorf("the table shows no ✓:\n%s", out)
	}
}

func TestDoctorFindsTheProbeSymbolsOfACommand(t *testing.T) {
	requireBPF(t)
	tests := []struct {
		name      string
		args      []string
		wantFound bool
		fails     bool
		wantRow   string
	}{
		{"node running a node-llama-cpp script: the addon's libraries and CPU variants", []string{"--", "node", llmtest.Driver()}, true, false, "node-llama-cpp"},
		{"a --lib file, and the CPU backends dlopen()ed from beside it", []string{"--lib", filepath.Join(llmtest.LibDir(), "libllama.v0.5.0.so"), "--", "true"}, true, false, "symbols in libllama.v0.5.0.so"},
		{"a command without llama.cpp", []string{"--", "ls"}, false, false, "probe point llama_decode"},
		{"a command that does not exist fails", []string{"--", "no-such-command-iocorr"}, false, true, "command no-such-command-iocorr"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := llmtest.Installed(); err != nil && tc.wantFound {
				t.Fatalf("node-llama-cpp is not installed (make setup): %v", err)
			}
			rows, err := doctorRows(t, tc.args...)
			var ee exitError
			if tc.fails != (errors.As(err, &ee) && ee.code == 1) {
				t.Fatalf("err = %v, want failure %v", err, tc.fails)
			}
			if _, ok := rows[tc.wantRow]; !ok {
				t.Fatalf("no row %q in %v", tc.wantRow, rows)
			}
			if tc.fails {
				return
			}
			for _, sym := range []string{"llama_decode", "ggml_graph_compute", "ggml_compute_forward_get_rows"} {
				if got := rows["probe point "+sym].Status == "ok"; got != tc.wantFound {
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
