package llmtest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hybrid offload without a GPU: llama.cpp's Vulkan backend on Mesa's
// lavapipe, a Vulkan device that runs on the CPU. The tools are the
// Shared build's own (llama-completion and its impl library, built from
// node-llama-cpp 3.22.1's source), run against the libraries of
// @node-llama-cpp/linux-x64-vulkan 3.22.1, built from the same source with
// GGML_VULKAN and GGML_BACKEND_DL: no third llama.cpp build, which would
// add some 7 minutes of compiling to a fresh machine's setup (glslc and
// every shader) for the same ggml code paths.

// VulkanLibDir holds the Vulkan build's libraries testdata/llm/setup.sh
// installs.
func VulkanLibDir() string {
	return filepath.Join(filepath.Dir(Driver()), "vulkan", "node_modules", "@node-llama-cpp", "linux-x64-vulkan", "bins", "linux-x64-vulkan")
}

// HybridEnv is what a hybrid run needs in its environment: ggml-vulkan
// skips CPU-type devices such as lavapipe unless GGML_VK_VISIBLE_DEVICES
// names them; Mesa keeps the pipelines it compiled in its shader cache,
// kept here in one place per machine (lavapipe compiles ggml's ~45 s of
// shaders once, not once per test: the first prompt took 53–85 s from an
// empty cache here, 3.7 s from a warm one).
func HybridEnv() []string {
	return []string{"GGML_VK_VISIBLE_DEVICES=0", "MESA_SHADER_CACHE_DIR=" + ShaderCache()}
}

// SetHybridEnv sets HybridEnv in the test's environment, for the commands
// it runs and records.
func SetHybridEnv(t testing.TB) {
	t.Helper()
	for _, kv := range HybridEnv() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// ShaderCache is Mesa's shader cache of the hybrid runs, beside the
// llama.cpp builds.
func ShaderCache() string {
	return filepath.Join(BuildCache(), "mesa-shader-cache")
}

// HybridDir is the directory a hybrid run's tools run from: hard links
// to the Shared build's llama-completion and llama-bench and their impl
// libraries
// (their RUNPATH $ORIGIN then finds what lies beside them, and a hard
// link is no new file to sync before a uprobe), hard links (or copies) of
// every library of the Vulkan build, and the sonames the tools were linked
// against (libllama.so.0, libggml.so.0, libggml-base.so.0,
// libllama-common.so.0) pointing at that build's files. ggml loads its
// backends (libggml-vulkan.so, the best libggml-cpu-<arch>.so) from the
// executable's directory: this one. Made once per build, published by a
// rename.
func HybridDir(t testing.TB) string {
	t.Helper()
	dir, err := HybridBin()
	if err != nil {
		missing(t, "llama.cpp's Vulkan build on lavapipe", err)
	}
	return dir
}

// hybridTools are the Shared build's files HybridBin links: the tools and
// their impl libraries.
var hybridTools = []string{"llama-completion", "libllama-completion-impl.so", "llama-bench", "libllama-bench-impl.so"}

// HybridBin is HybridDir for a caller without a test (make bench): the
// directory, or why it cannot be made.
var HybridBin = sync.OnceValues(func() (string, error) {
	if err := vulkanPresent(); err != nil {
		return "", err
	}
	shared, err := BuildDir(Shared)
	if err != nil {
		return "", err
	}
	dest := filepath.Join(filepath.Dir(filepath.Dir(shared)), "vulkan-3.22.1", "bin")
	if hybridComplete(dest) {
		return dest, nil
	}
	// One made before it linked every tool: made again.
	if err := os.RemoveAll(dest); err != nil {
		return "", err
	}
	lib := VulkanLibDir()
	libs, err := filepath.Glob(filepath.Join(lib, "*.so"))
	if err != nil || len(libs) == 0 {
		return "", fmt.Errorf("no libraries in %s (run testdata/llm/setup.sh): %v", lib, err)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(filepath.Dir(shared)), ".vulkan.")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	for _, f := range hybridTools {
		if err := os.Link(filepath.Join(shared, f), filepath.Join(tmp, f)); err != nil {
			return "", fmt.Errorf("the shared build's %s: %w", f, err)
		}
	}
	for _, l := range libs {
		if err := linkOrCopy(l, filepath.Join(tmp, filepath.Base(l))); err != nil {
			return "", fmt.Errorf("the Vulkan build's %s: %w", filepath.Base(l), err)
		}
	}
	for soname, file := range map[string]string{
		"libllama.so.0":        "libllama.vulkan.v0.5.0.so",
		"libggml.so.0":         "libggml.vulkan.v0.5.0.so",
		"libggml-base.so.0":    "libggml-base.so",
		"libllama-common.so.0": "libllama-common.so",
	} {
		if _, err := os.Stat(filepath.Join(lib, file)); err != nil {
			return "", fmt.Errorf("the Vulkan build has no %s: %w", file, err)
		}
		if err := os.Symlink(file, filepath.Join(tmp, soname)); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return "", err
	}
	// Another test binary may have published it first: theirs serves as well.
	if err := os.Rename(tmp, dest); err != nil && !hybridComplete(dest) {
		return "", fmt.Errorf("publishing %s: %w", dest, err)
	}
	return dest, nil
})

// hybridSonames are the names the hybrid directory's tools load the
// Vulkan build's libraries by.
var hybridSonames = []string{"libllama.so.0", "libggml.so.0", "libggml-base.so.0", "libllama-common.so.0", "libggml-vulkan.so"}

// hybridComplete says whether dir holds every tool and every library the
// tools load, each resolving to a file. One made when the libraries were
// symbolic links into a checkout since deleted loads no Vulkan backend:
// llama.cpp then runs on the CPU alone, and says nothing.
func hybridComplete(dir string) bool {
	for _, f := range append(append([]string{}, hybridTools...), hybridSonames...) {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// linkOrCopy puts the file from at to as a hard link, or a copy where
// the two are on different file systems: the directory, kept per machine,
// must not depend on the checkout that made it.
func linkOrCopy(from, to string) error {
	if err := os.Link(from, to); err == nil {
		return nil
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// vulkanPresent says why lavapipe cannot run here, or nil.
func vulkanPresent() error {
	if _, err := os.Stat(filepath.Join(VulkanLibDir(), "libggml-vulkan.so")); err != nil {
		return fmt.Errorf("no Vulkan build of node-llama-cpp (run testdata/llm/setup.sh): %w", err)
	}
	if _, err := os.Stat("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"); err != nil {
		return fmt.Errorf("no lavapipe (apt-get install mesa-vulkan-drivers): %w", err)
	}
	return nil
}

// HybridMemLimit is the memory limit MoE's hybrid runs on lavapipe are
// recorded under. Lavapipe's buffers and the process's own are memory the
// kernel cannot reclaim without swap; sampled from the run's cgroup: with
// every layer on the GPU backend (HybridArgs(-1)) 78 MiB anonymous and,
// with driveralloc's memfds, 23 MiB of shmem; with the last 3 layers
// there, 93 MiB anonymous. Under MemLimit that left 11 to 19 MiB for the
// model's pages, page tables and slab, and the kernel killed the oracle
// now and then (twice in fresh CI runs, each at the limit after about a
// million failed charges). 160 MiB still holds less than the model's
// 225 MiB file, so experts are still read again while tokens decode.
const HybridMemLimit = "160MiB"

// HybridArgs are the offload flags of llama.cpp's tools: every layer on
// the GPU backend (-ngl 99), the experts of the first cpuMoE layers left
// on the CPU (--n-cpu-moe; all of them with --cpu-moe when cpuMoE < 0).
func HybridArgs(cpuMoE int) []string {
	if cpuMoE < 0 {
		return []string{"-ngl", "99", "--cpu-moe"}
	}
	return []string{"-ngl", "99", "--n-cpu-moe", fmt.Sprint(cpuMoE)}
}

// WarmShaderCache runs argv once, untraced, with HybridEnv and env, so
// that a recorded hybrid run neither spends its time in lavapipe's shader
// compiler nor its memory limit on LLVM (a recording of the oracle under
// 112 MiB was killed while compiling the pipelines its cb_eval's split
// graphs need, which llama-completion's had not). The pipelines differ
// with the command and its flags: name says which kind of run argv is,
// and a stamp per name in the cache says it was done on this machine.
func WarmShaderCache(t testing.TB, name string, argv []string, env ...string) {
	t.Helper()
	stamp := filepath.Join(ShaderCache(), ".iocorr-warm-"+name)
	if _, err := os.Stat(stamp); err == nil {
		return
	}
	if err := os.MkdirAll(ShaderCache(), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), HybridEnv()...), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("warming Mesa's shader cache: %s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	t.Logf("Mesa's shader cache warmed for %s in %v", name, time.Since(start).Round(time.Millisecond))
	if err := os.WriteFile(stamp, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}
