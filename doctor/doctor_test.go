package doctor

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestACheckFailsOnlyWhenRecordNeedsIt(t *testing.T) {
	tests := []struct {
		name string
		in   check
		want Check
	}{
		{"passed", check{name: "uprobes", ok: true, required: true, detail: "/sys/bus"}, Check{"uprobes", OK, "/sys/bus"}},
		{"missing and not needed", check{name: "memory cgroup v1", detail: "not mounted; not needed"},
			Check{"memory cgroup v1", Missing, "not mounted; not needed"}},
		{"missing and needed", check{name: "kernel BTF", required: true, detail: "no /sys/kernel/btf/vmlinux"},
			Check{"kernel BTF", Fail, "required: no /sys/kernel/btf/vmlinux"}},
		{"missing, needed, no detail", check{name: "tracepoint block/block_rq_issue", required: true},
			Check{"tracepoint block/block_rq_issue", Fail, "required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.result()
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if Failed([]Check{got}) != (tc.want.Status == Fail) {
				t.Errorf("Failed = %v for %s", !(tc.want.Status == Fail), tc.want.Status)
			}
		})
	}
}

// The dozen CPU-backend variants of which one is loaded are one entry.
func TestProbePointPlacesSumUpTheCPUVariants(t *testing.T) {
	got := summarizeWhere([]place{{"", "libllama.so"}, {"local", "libggml-base.so"},
		{"", "libggml-cpu-haswell.so"}, {"", "libggml-cpu-skylakex.so"}, {"local", "libggml-cpu-x64.so"}})
	want := "in libllama.so, local in libggml-base.so, in 2 libggml-cpu-*.so variants (one is loaded at run time), " +
		"local in 1 libggml-cpu-*.so variants (one is loaded at run time)"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// A ggml built with dynamic backends dlopen()s its CPU variants from
// beside its libraries: they are searched although no DT_NEEDED names them.
func TestTheCPUBackendsBesideALibraryAreSearched(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"libllama.so", "libggml-cpu-haswell.so", "libggml-cpu-x64.so", "libother.so"} {
		touch(t, filepath.Join(dir, f))
	}
	got := withBackendVariants([]string{filepath.Join(dir, "libllama.so")})
	want := []string{filepath.Join(dir, "libllama.so"), filepath.Join(dir, "libggml-cpu-haswell.so"), filepath.Join(dir, "libggml-cpu-x64.so")}
	if !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if got := withBackendVariants([]string{filepath.Join(dir, "libother.so")}); len(got) != 1 {
		t.Errorf("a library that is not ggml's brought in %v", got)
	}
}

// node-llama-cpp's addons are found in node_modules at or above the
// script's directory: prebuilt packages and local builds.
func TestNodeLlamaAddonsAreFoundAboveTheScript(t *testing.T) {
	root := t.TempDir()
	prebuilt := filepath.Join(root, "node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node")
	local := filepath.Join(root, "node_modules/node-llama-cpp/llama/localBuilds/b1/Release/llama-addon.node")
	touch(t, prebuilt)
	touch(t, local)
	scriptDir := filepath.Join(root, "app", "src")
	if err := os.MkdirAll(scriptDir, 0o755); err != nil {
		t.Fatal(err)
	}
	got := nodeLlamaAddons([]string{scriptDir, root})
	if want := []string{prebuilt, local}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v (each once)", got, want)
	}
	if dirs := nodeScriptDirs([]string{"--flag", "x.txt"}); dirs != nil {
		t.Errorf("a command without a script looked in %v", dirs)
	}
	if dirs := nodeScriptDirs([]string{filepath.Join(scriptDir, "main.mjs")}); len(dirs) != 2 || dirs[0] != scriptDir {
		t.Errorf("a script's directories: %v, want %s and the working directory", dirs, scriptDir)
	}
}
