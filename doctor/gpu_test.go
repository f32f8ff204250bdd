package doctor

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/testkit/llmtest"
)

// TestGPUDriverCheckSaysWhatTheBoxOffers builds the files a GPU box has
// under a fake root: the NVIDIA driver's version and device nodes (as on
// the H200 box: driver 580.159, /dev/nvidia0 and /dev/nvidiactl), a DRM
// render node with its kernel driver, AMD's /dev/kfd; none of them makes
// a CPU box.
func TestGPUDriverCheckSaysWhatTheBoxOffers(t *testing.T) {
	tests := []struct {
		name   string
		files  []string          // empty files under the root
		links  map[string]string // symlinks under the root → targets
		wantOK bool
		want   []string
	}{
		{"a CPU box", nil, nil, false, []string{"none found", "lavapipe"}},
		{"an NVIDIA box", []string{"proc/driver/nvidia/version", "dev/nvidia0", "dev/nvidiactl", "dev/nvidia-uvm"}, nil, true,
			[]string{"NVIDIA driver 580.159", "1 NVIDIA device(s) (nvidia0)"}},
		{"a DRM render node", []string{"sys/class/drm/renderD128/device/x"}, map[string]string{"sys/class/drm/renderD128/device/driver": "../../../bus/pci/drivers/amdgpu"}, true,
			[]string{"/dev/dri/renderD128 (amdgpu)"}},
		{"ROCm", []string{"dev/kfd"}, nil, true, []string{"/dev/kfd (AMD ROCm)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			for _, f := range tc.files {
				p := filepath.Join(root, f)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				body := ""
				if strings.HasSuffix(f, "nvidia/version") {
					body = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159  Thu Oct  9 2025\nGCC version:  gcc version 12.2.0\n"
				}
				if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for l, target := range tc.links {
				if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
					t.Fatal(err)
				}
			}
			defer func(r string) { gpuRoot = r }(gpuRoot)
			gpuRoot = root
			c := driverCheck()
			if c.ok != tc.wantOK || c.required {
				t.Fatalf("%+v: want ok %v, never required", c, tc.wantOK)
			}
			for _, w := range tc.want {
				if !strings.Contains(c.detail, w) {
					t.Errorf("detail %q lacks %q", c.detail, w)
				}
			}
		})
	}
}

func TestParseListDevicesReadsLlamaCppsList(t *testing.T) {
	tests := []struct {
		name   string
		out    string
		want   []string
		wantOK bool
	}{
		{"the H200 through Vulkan", "Available devices:\n  Vulkan0: NVIDIA H200 (143771 MiB, 143000 MiB free)\n", []string{"Vulkan0: NVIDIA H200 (143771 MiB, 143000 MiB free)"}, true},
		{"two devices", "ggml_vulkan: Found 1 Vulkan devices:\nAvailable devices:\n  CUDA0: NVIDIA H200 (1 MiB, 1 MiB free)\n  Vulkan0: llvmpipe (2 MiB, 2 MiB free)\n", []string{"CUDA0: NVIDIA H200 (1 MiB, 1 MiB free)", "Vulkan0: llvmpipe (2 MiB, 2 MiB free)"}, true},
		{"none but the CPU", "Available devices:\n  (none)\n", nil, true},
		{"no list at all", "error: unknown argument: --list-devices\n", nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseListDevices([]byte(tc.out))
			if ok != tc.wantOK || !slices.Equal(got, tc.want) {
				t.Fatalf("%q, %v; want %q, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

// TestDoctorListsTheDevicesTheCommandsLlamaCppSees runs doctor on the
// Shared build's llama-completion with the Vulkan build's libraries,
// once with lavapipe visible (GGML_VK_VISIBLE_DEVICES=0: its Vulkan0) and
// once without any Vulkan driver (VK_DRIVER_FILES naming none), when a
// "hybrid" run would be the CPU's alone.
func TestDoctorListsTheDevicesTheCommandsLlamaCppSees(t *testing.T) {
	llmtest.Require(t)
	hy := llmtest.HybridDir(t)
	llmtest.SetHybridEnv(t)
	t.Setenv("LD_LIBRARY_PATH", hy)
	tool := filepath.Join(hy, "llama-completion")
	c := listDevicesCheck(tool)
	if !c.ok || !strings.Contains(c.detail, "Vulkan0: llvmpipe") {
		t.Errorf("with lavapipe: %+v; want Vulkan0: llvmpipe", c)
	}
	t.Setenv("VK_DRIVER_FILES", filepath.Join(t.TempDir(), "none.json"))
	c = listDevicesCheck(tool)
	if c.ok || !strings.Contains(c.detail, "none but the CPU") {
		t.Errorf("without a Vulkan driver: %+v; want none but the CPU", c)
	}
	if rows := gpuChecks([]string{tool, "-m", "x.gguf"}); len(rows) != 3 || rows[2].name != "devices llama.cpp sees" {
		t.Errorf("doctor -- llama-completion: %+v; want the devices it sees last", rows)
	}
}
