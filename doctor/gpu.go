package doctor

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// A hybrid run is only as hybrid as the GPU llama.cpp finds: without a
// driver (or its Vulkan ICD) llama.cpp runs on the CPU and says little,
// so doctor says what a GPU box offers, and what the command's llama.cpp
// sees there.

// gpuRoot is the file system root the GPU checks read (a test's fake).
var gpuRoot = "/"

// icdDirs are where the Vulkan loader looks for drivers, when
// VK_DRIVER_FILES and VK_ICD_FILENAMES do not say.
var icdDirs = []string{"/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d"}

// gpuChecks are the GPU driver, the Vulkan drivers, and, for a llama.cpp
// tool (argv[0] named llama-*), the devices it lists. None is required:
// record traces CPU-only runs alike.
func gpuChecks(argv []string) []check {
	out := []check{driverCheck(), icdCheck()}
	if len(argv) > 0 && strings.HasPrefix(filepath.Base(argv[0]), "llama-") {
		out = append(out, listDevicesCheck(argv[0]))
	}
	return out
}

func driverCheck() check {
	var found []string
	if b, err := os.ReadFile(filepath.Join(gpuRoot, "proc/driver/nvidia/version")); err == nil {
		found = append(found, nvidiaVersion(string(b)))
	}
	if nodes, _ := filepath.Glob(filepath.Join(gpuRoot, "dev/nvidia[0-9]*")); len(nodes) > 0 {
		found = append(found, fmt.Sprintf("%d NVIDIA device(s) (%s)", len(nodes), strings.Join(baseNames(nodes), ", ")))
	}
	renders, _ := filepath.Glob(filepath.Join(gpuRoot, "sys/class/drm/renderD*"))
	for _, r := range renders {
		drv, err := os.Readlink(filepath.Join(r, "device/driver"))
		if err != nil {
			continue
		}
		found = append(found, fmt.Sprintf("/dev/dri/%s (%s)", filepath.Base(r), filepath.Base(drv)))
	}
	if _, err := os.Stat(filepath.Join(gpuRoot, "dev/kfd")); err == nil {
		found = append(found, "/dev/kfd (AMD ROCm)")
	}
	if len(found) == 0 {
		return check{name: "GPU driver", detail: "none found (/proc/driver/nvidia, /dev/nvidia*, /dev/dri/renderD*, /dev/kfd): llama.cpp runs on the CPU, or on Mesa's lavapipe (GGML_VK_VISIBLE_DEVICES=0)"}
	}
	return check{name: "GPU driver", ok: true, detail: strings.Join(found, "; ")}
}

// nvidiaVersion is the driver's version from /proc/driver/nvidia/version
// ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.159  ...").
func nvidiaVersion(text string) string {
	line, _, _ := strings.Cut(text, "\n")
	f := strings.Fields(line)
	for i, w := range f {
		if w == "Module" && i+1 < len(f) {
			return "NVIDIA driver " + f[i+1]
		}
	}
	return "NVIDIA driver (version unread)"
}

func icdCheck() check {
	var files []string
	for _, env := range []string{"VK_DRIVER_FILES", "VK_ICD_FILENAMES"} {
		if v := os.Getenv(env); v != "" {
			files = append(files, strings.Split(v, ":")...)
			return icdResult(files, env+" names them")
		}
	}
	for _, d := range icdDirs {
		fs, _ := filepath.Glob(filepath.Join(gpuRoot, d, "*.json"))
		files = append(files, fs...)
	}
	return icdResult(files, "")
}

func icdResult(files []string, how string) check {
	if len(files) == 0 {
		return check{name: "Vulkan drivers", detail: "no ICD file (" + strings.Join(icdDirs, ", ") + "; VK_DRIVER_FILES): ggml's Vulkan backend finds no device"}
	}
	detail := strings.Join(baseNames(files), ", ")
	if how != "" {
		detail += " (" + how + ")"
	}
	return check{name: "Vulkan drivers", ok: true, detail: detail}
}

// listDevicesCheck runs tool --list-devices, as llama.cpp's common tools
// take it, under this environment: what the tool would offload to.
func listDevicesCheck(tool string) check {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b, err := exec.CommandContext(ctx, tool, "--list-devices").Output()
	if err != nil {
		return check{name: "devices llama.cpp sees", detail: fmt.Sprintf("%s --list-devices: %v", tool, err)}
	}
	devs, ok := parseListDevices(b)
	switch {
	case !ok:
		return check{name: "devices llama.cpp sees", detail: tool + " --list-devices printed no device list"}
	case len(devs) == 0:
		return check{name: "devices llama.cpp sees", detail: "none but the CPU: a hybrid run (-ngl) runs on the CPU alone; check the driver and its Vulkan ICD (VK_DRIVER_FILES)"}
	}
	return check{name: "devices llama.cpp sees", ok: true, detail: strings.Join(devs, "; ")}
}

// parseListDevices reads llama.cpp's "Available devices:" list, a device
// an indented line ("  Vulkan0: NVIDIA H200 (143771 MiB, 143000 MiB
// free)", "  (none)" for none); ok is false without the list.
func parseListDevices(out []byte) (devs []string, ok bool) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if strings.TrimSpace(line) == "Available devices:" {
			ok = true
			continue
		}
		if ok && strings.HasPrefix(line, "  ") {
			if d := strings.TrimSpace(line); d != "(none)" {
				devs = append(devs, d)
			}
		}
	}
	return devs, ok
}

func baseNames(paths []string) []string {
	out := make([]string, len(paths))
	for i, p := range paths {
		out[i] = filepath.Base(p)
	}
	return slices.Compact(out)
}
