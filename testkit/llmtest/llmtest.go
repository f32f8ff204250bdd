// Package llmtest runs real llama.cpp — the prebuilt libraries of the npm
// package node-llama-cpp, driven by testdata/llm/generate.mjs, and the
// llama-completion and llama-bench scripts/build-llama.sh builds from
// the source node-llama-cpp ships (and llama-cli, shared) — for tests and
// benchmarks, on synthetic models. MoE, MemLimit and RecordedMoE
// (fixture.go) are the one model, memory limit and recorded run the
// end-to-end tests share. arch.go quantizes models with that build's
// llama-quantize and builds testdata/routeoracle, the routing oracle
// compiled against its headers and libllama.
package llmtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/iocorr/iocorr/gguf"
)

// Root is the repository root, found from the working directory.
func Root() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Driver is the path of generate.mjs.
func Driver() string {
	root, err := Root()
	if err != nil {
		return ""
	}
	return filepath.Join(root, "testdata", "llm", "generate.mjs")
}

// LibDir holds libllama and the libggml variants.
func LibDir() string {
	return filepath.Join(filepath.Dir(Driver()), "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
}

// LlamaLib is libllama itself (libllama.v0.5.0.so in 3.22.1): the file
// llama_decode's uprobe goes on. libllama-common.so beside it is not it.
func LlamaLib() (string, error) {
	libs, err := filepath.Glob(filepath.Join(LibDir(), "libllama.*so"))
	if err != nil {
		return "", err
	}
	if len(libs) != 1 {
		return "", fmt.Errorf("want one libllama.*so in %s, found %v", LibDir(), libs)
	}
	return libs[0], nil
}

// Version is a release of node-llama-cpp in the version matrix, with the
// llama.cpp its prebuilt libraries were built from.
type Version struct {
	NodeLlamaCpp string // npm version; testdata/llm/versions/<it>/
	LlamaCpp     string // llama.cpp release tag (llama/llama.cpp.info.json)
}

// Versions are the older node-llama-cpp releases testdata/llm/setup.sh
// installs side by side, one directory each, for the version matrix:
// prebuilt llama.cpp from late 2024 to mid 2025. The default one (3.22.1,
// Generation.Version empty) is not among them.
var Versions = []Version{
	{"3.3.0", "b4234"},  // 2024-12: ggml_tensor still has the deprecated backend field
	{"3.6.0", "b4753"},  // 2025-02: one libggml-cpu per CPU variant
	{"3.10.0", "b5640"}, // 2025-06: ops moved to ops.cpp, exported
}

// VersionDir is where setup.sh installs node-llama-cpp v.
func VersionDir(v string) string {
	return filepath.Join(filepath.Dir(Driver()), "versions", v)
}

// VersionLibDir holds the prebuilt libraries of node-llama-cpp v.
func VersionLibDir(v string) string {
	return filepath.Join(VersionDir(v), "node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64")
}

// RequireVersion skips (or, like Require, fails under CI) a test when
// node-llama-cpp v is not installed.
func RequireVersion(t testing.TB, v string) {
	t.Helper()
	Require(t)
	err := func() error {
		if _, err := os.Stat(filepath.Join(VersionDir(v), "node_modules", "node-llama-cpp", "package.json")); err != nil {
			return fmt.Errorf("node-llama-cpp %s is not installed in %s", v, VersionDir(v))
		}
		for _, pat := range []string{"libllama*.so", "libggml-base.so"} {
			if libs, _ := filepath.Glob(filepath.Join(VersionLibDir(v), pat)); len(libs) == 0 {
				return fmt.Errorf("no %s in %s", pat, VersionLibDir(v))
			}
		}
		return nil
	}()
	if err != nil {
		missing(t, "node-llama-cpp "+v, err)
	}
}

// Build is one of the two llama.cpp builds scripts/build-llama.sh makes
// from the source node-llama-cpp ships.
type Build int

const (
	// Shared is CMake's Release defaults: the tools load libllama.so,
	// libggml-base.so and libggml-cpu.so from beside them (RUNPATH
	// $ORIGIN), where the probe points are.
	Shared Build = iota + 1
	// Static is built with BUILD_SHARED_LIBS=OFF: llama.cpp and ggml are
	// linked into each executable, probe points included.
	Static
)

// Builds are both builds, for tests that run on each.
var Builds = []Build{Shared, Static}

func (b Build) String() string {
	switch b {
	case Shared:
		return "shared"
	case Static:
		return "static"
	}
	return fmt.Sprintf("Build(%d)", int(b))
}

// BuildCache is where scripts/build-llama.sh caches its builds:
// $IOCORR_LLAMA_CACHE, /var/cache/iocorr/llama.cpp by default.
func BuildCache() string {
	if d := os.Getenv("IOCORR_LLAMA_CACHE"); d != "" {
		return d
	}
	return "/var/cache/iocorr/llama.cpp"
}

// Bundle is the git bundle of llama.cpp source node-llama-cpp ships.
func Bundle() string {
	return filepath.Join(filepath.Dir(Driver()), "node_modules", "node-llama-cpp", "llama", "gitRelease.bundle")
}

var bundleKey = sync.OnceValues(func() (string, error) {
	f, err := os.Open(Bundle())
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", Bundle(), err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
})

// BuildDir is the bin directory of build b: its tools and, for Shared,
// its libraries. It is keyed like scripts/build-llama.sh keys it, by the
// first 16 hex digits of the bundle's sha256, so a changed bundle is
// never served an old build.
func BuildDir(b Build) (string, error) {
	if b != Shared && b != Static {
		return "", fmt.Errorf("no llama.cpp build %v", b)
	}
	key, err := bundleKey()
	if err != nil {
		return "", fmt.Errorf("no llama.cpp source bundle: %w", err)
	}
	return filepath.Join(BuildCache(), key, b.String(), "bin"), nil
}

// BuiltTools are the tools scripts/build-llama.sh builds (tools_static,
// tools_shared there), by build.
var BuiltTools = map[Build][]string{
	Static: {"llama-completion", "llama-bench"},
	Shared: {"llama-cli", "llama-completion", "llama-bench", "llama-server", "llama-quantize"},
}

// builtTool says where tool of build b is, or why it is not there.
func builtTool(b Build, tool string) (string, error) {
	if !slices.Contains(BuiltTools[b], tool) {
		if slices.Contains(BuiltTools[Shared], tool) {
			return "", fmt.Errorf("scripts/build-llama.sh builds %s only in the shared build", tool)
		}
		return "", fmt.Errorf("%s is not one of the tools scripts/build-llama.sh builds", tool)
	}
	dir, err := BuildDir(b)
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, tool)
	info, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("no %s build of %s: %w", b, tool, err)
	}
	if info.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not executable", p)
	}
	return p, nil
}

// CLI returns the path of tool (llama-completion or llama-bench;
// llama-cli, llama-server or llama-quantize of Shared) of build b. Like Require, it skips the test when the
// build is missing, and fails it under IOCORR_REQUIRE_LLAMA or CI.
func CLI(t testing.TB, b Build, tool string) string {
	t.Helper()
	p, err := builtTool(b, tool)
	if err != nil {
		missing(t, "llama.cpp built from source", err)
	}
	return p
}

// SharedLibDir returns the directory holding the Shared build's
// libllama.so, libggml-base.so and libggml-cpu.so (the tools' own
// directory: CMake writes libraries beside the executables), skipping or
// failing like CLI when they are not there.
func SharedLibDir(t testing.TB) string {
	t.Helper()
	dir, err := BuildDir(Shared)
	if err == nil {
		for _, lib := range []string{"libllama.so", "libggml-base.so", "libggml-cpu.so"} {
			if _, err = os.Stat(filepath.Join(dir, lib)); err != nil {
				err = fmt.Errorf("no %s in the shared build: %w", lib, err)
				break
			}
		}
	}
	if err != nil {
		missing(t, "llama.cpp built from source", err)
	}
	return dir
}

// missing skips, or fails under IOCORR_REQUIRE_LLAMA or CI, so that a
// broken setup can't pass as a green run of skipped tests.
func missing(t testing.TB, what string, err error) {
	t.Helper()
	if os.Getenv("IOCORR_REQUIRE_LLAMA") != "" || os.Getenv("CI") != "" {
		t.Fatalf("%s is required: %v (run make setup)", what, err)
	}
	t.Skipf("%s not available: %v (run make setup)", what, err)
}

// WeightType is the weight type of the models of tests that measure I/O
// on the model file. On CPUs with AMX (Sapphire Rapids and later, this
// lab's VMs among them) ggml's CPU backend moves F16 and Q8_0 mat-mul
// weights into an anonymous AMX buffer while loading, so inference never
// reads them from the mapping again: no fault, no page-cache event, and
// under a memory limit they cannot be reclaimed at all. BF16 has no such
// buffer (neither AMX nor CPU_REPACK takes it, checked in the llama.cpp
// source node-llama-cpp ships), so its weights stay file-backed on every
// x86 CPU.
const WeightType = gguf.TypeBF16

// Installed says why real llama.cpp cannot run here, or nil when it can:
// node on the PATH, the driver, and the libraries testdata/llm/setup.sh
// installs.
func Installed() error {
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("node not found on the PATH")
	}
	drv := Driver()
	if drv == "" {
		return fmt.Errorf("no repository root (go.mod) above the working directory")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(drv), "node_modules", "node-llama-cpp", "package.json")); err != nil {
		return fmt.Errorf("node-llama-cpp is not installed in %s", filepath.Dir(drv))
	}
	for _, pat := range []string{"libllama.*so", "libggml-base.so"} {
		if libs, _ := filepath.Glob(filepath.Join(LibDir(), pat)); len(libs) == 0 {
			return fmt.Errorf("no %s in %s", pat, LibDir())
		}
	}
	return nil
}

// Require skips a test when real llama.cpp is not installed, unless CI or
// IOCORR_REQUIRE_LLAMA says it must run: then it fails, so that a broken
// setup can't pass as a green run of skipped tests.
func Require(t testing.TB) {
	t.Helper()
	if err := Installed(); err != nil {
		missing(t, "real llama.cpp", err)
	}
}

// Generation is what one generation asks of the driver; zero fields take
// its defaults (16 tokens, 2 threads, a 33-token prompt, context 512,
// batch 512, greedy sampling).
type Generation struct {
	Tokens  int
	Threads int
	Prompt  string
	Ctx     int
	Batch   int
	// Seed, when not nil, samples at Temperature (0.8 when zero) from
	// llama.cpp's RNG seeded with *Seed: reproducible, yet not greedy.
	// A Temperature without a Seed is an error of the driver's.
	Seed        *uint32
	Temperature float64
	// OnlyEOG forbids every token but end-of-generation ones, so each
	// token generated would end a chat; the driver generates on anyway.
	OnlyEOG bool
	JSON    bool // report as one JSON object; Generate sets it
	// Version runs node-llama-cpp Version (one of Versions) and its
	// prebuilt llama.cpp instead of the default 3.22.1.
	Version string
}

// Seed returns a pointer to s, for Generation.Seed.
func Seed(s uint32) *uint32 { return &s }

// Command is the driver's command line; run it directly or under a tracer.
func Command(ctx context.Context, model string, o Generation) *exec.Cmd {
	args := []string{Driver(), "--model", model}
	if o.Tokens > 0 {
		args = append(args, "--tokens", strconv.Itoa(o.Tokens))
	}
	if o.Threads > 0 {
		args = append(args, "--threads", strconv.Itoa(o.Threads))
	}
	if o.Prompt != "" {
		args = append(args, "--prompt", o.Prompt)
	}
	if o.Ctx > 0 {
		args = append(args, "--ctx", strconv.Itoa(o.Ctx))
	}
	if o.Batch > 0 {
		args = append(args, "--batch", strconv.Itoa(o.Batch))
	}
	if o.Seed != nil {
		args = append(args, "--seed", strconv.FormatUint(uint64(*o.Seed), 10))
	}
	// Without a seed the driver refuses this: a run must be repeatable.
	if o.Temperature > 0 {
		args = append(args, "--temperature", strconv.FormatFloat(o.Temperature, 'g', -1, 64))
	}
	if o.OnlyEOG {
		args = append(args, "--only-eog")
	}
	if o.JSON {
		args = append(args, "--json")
	}
	if o.Version != "" {
		args = append(args, "--llama-version", o.Version)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		node = "node"
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Args[0] = "node"
	return cmd
}

// Result is the driver's report.
type Result struct {
	PID           int     `json:"pid"`
	Model         string  `json:"model"`
	LoadMS        float64 `json:"load_ms"`
	PromptTokens  int     `json:"prompt_tokens"`
	BatchSize     int     `json:"batch_size"`
	PromptBatches int     `json:"prompt_batches"`
	Generated     int     `json:"generated"`
	// EOGTokens of the generated ones were end-of-generation tokens,
	// decoded like any other.
	EOGTokens   int     `json:"eog_tokens"`
	TokenIDs    []int   `json:"tokens"`
	Temperature float64 `json:"temperature"`
	Seed        *uint32 `json:"seed"`
	// DecodeCallsExpected is how many times the run called llama_decode:
	// PromptBatches + Generated - 1 (measured; see generate.mjs).
	DecodeCallsExpected int      `json:"decode_calls_expected"`
	EvalMS              float64  `json:"eval_ms"`
	PromptMS            float64  `json:"prompt_ms"`
	TokensPerS          float64  `json:"tokens_per_s"` // decode speed, after the first token
	Threads             int      `json:"threads"`
	Libs                []string `json:"libs"` // libllama*/libggml*.so the process mapped
}

// ParseResult reads the driver's JSON report from its output (the last
// line that is a JSON object).
func ParseResult(out []byte) (Result, error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if strings.HasPrefix(l, "{") {
			var r Result
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				return r, fmt.Errorf("parsing the driver's report: %w", err)
			}
			return r, nil
		}
	}
	return Result{}, fmt.Errorf("no report in the driver's output %q", out)
}

// Generate runs one generation untraced.
func Generate(ctx context.Context, model string, o Generation) (Result, error) {
	o.JSON = true
	cmd := Command(ctx, model, o)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		return Result{}, fmt.Errorf("generating with %s: %w: %s", filepath.Base(model), err, strings.TrimSpace(errb.String()))
	}
	return ParseResult(out)
}

var (
	modelsMu sync.Mutex
	// models is this binary's copy of each model, by its spec and by the
	// shared file's path; shared maps a copy back to that path.
	models   = map[string]string{}
	shared   = map[string]string{}
	modelGen string
	modelDir string
)

// Model writes a synthetic model for spec once per test binary, and
// returns its path; the binary's tests share it, read-only.
//
// The file is under the repository (.testmodels, removed by `make clean`)
// because that is a real disk, which page-cache and block-device
// experiments need, while os.TempDir may be tmpfs. A synth model is a
// pure function of its spec (seed included) and of the gguf package's
// code, so its name holds both hashes, and a file an earlier run left
// with the same name is the same model and is reused. CreateSynth writes
// to a temporary file, syncs and renames it: no reader sees half a model,
// and a new file is clean in the page cache, so eviction works on it.
//
// Each test binary reads a copy of its own (ownCopy): go test runs the
// packages' binaries side by side, and two processes reading one file
// share its page cache, so that one's cold run found the pages another's
// run had just read. predict's pinned run of the demo MoE read 46.9 MiB a
// decode token, where 121 were predicted, while bench's tests ran the
// same model.
func Model(t testing.TB, spec gguf.SynthSpec) string {
	t.Helper()
	spec = spec.WithDefaults()
	key := fmt.Sprintf("%+v", spec)
	modelsMu.Lock()
	defer modelsMu.Unlock()
	if p, ok := models[key]; ok {
		return p
	}
	if modelDir == "" {
		root, err := Root()
		if err != nil {
			t.Fatal(err)
		}
		gen, err := codeHash(filepath.Join(root, "gguf"))
		if err != nil {
			t.Fatalf("hashing the gguf package: %v", err)
		}
		dir := filepath.Join(root, ".testmodels")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		pruneModels(dir, gen)
		pruneCopies(dir)
		modelDir, modelGen = dir, gen
	}
	sum := sha256.Sum256([]byte(key))
	p := filepath.Join(modelDir, modelGen+"-"+hex.EncodeToString(sum[:8])+".gguf")
	if _, err := os.Stat(p); err != nil {
		if _, err := gguf.CreateSynth(p, spec); err != nil {
			t.Fatalf("writing model: %v", err)
		}
	} else {
		// pruneModels goes by age: a model in use must look young, also
		// to a test binary built from other gguf code.
		now := time.Now()
		os.Chtimes(p, now, now)
	}
	models[key] = ownModel(t, p)
	return models[key]
}

// ownModel is this test binary's copy of the shared model at p (with
// modelsMu held), made once: models holds it under p too, and shared
// maps it back to p.
func ownModel(t testing.TB, p string) string {
	if own, ok := models[p]; ok {
		return own
	}
	own, err := ownCopy(modelDir, p)
	if err != nil {
		t.Fatalf("copying the model for this test binary: %v", err)
	}
	models[p], shared[own] = own, p
	return own
}

// copiesPrefix names the folder of one test binary's copies, by its pid.
const copiesPrefix = "copies-"

// ownCopy copies the model at p into this process's folder under dir: a
// file of its own, with its own pages in the page cache. It is synced so
// that eviction can drop them.
func ownCopy(dir, p string) (string, error) {
	own := filepath.Join(dir, fmt.Sprintf("%s%d", copiesPrefix, os.Getpid()), filepath.Base(p))
	if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
		return "", err
	}
	src, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer src.Close()
	dst, err := os.Create(own)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return "", err
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return "", err
	}
	return own, dst.Close()
}

// pruneCopies removes the copies of test binaries that are gone (no
// process has their pid): a binary cannot remove its own at exit.
func pruneCopies(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(strings.TrimPrefix(e.Name(), copiesPrefix))
		if !e.IsDir() || !strings.HasPrefix(e.Name(), copiesPrefix) || err != nil {
			continue
		}
		if processGone(pid) {
			os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// codeHash is a short hash of the non-test Go files of a package: the
// code that decides what bytes a synth model has.
func codeHash(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	sort.Strings(files)
	h := sha256.New()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s %d\n", filepath.Base(f), len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:4]), nil
}

// pruneModels removes models an older gguf package wrote, so that
// .testmodels does not grow with every change to it. Only those unused
// for an hour (Model refreshes the time of one it reuses): a test binary
// built from other code may still be running on one (a file already open
// or mapped is unaffected by the unlink, but a later test would miss it).
func pruneModels(dir, gen string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasSuffix(name, ".gguf") || strings.HasPrefix(name, gen+"-") {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > time.Hour {
			os.Remove(filepath.Join(dir, name))
		}
	}
}

// BuildToucher builds testdata/toucher, the ground-truth page toucher,
// into the test's temporary directory and returns its path.
func BuildToucher(t testing.TB) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "toucher")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/toucher")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the toucher: %v\n%s", err, out)
	}
	return bin
}

// BuildMoEToucher compiles testdata/moetoucher (a scripted router that
// calls llama_decode and ggml_compute_forward_get_rows like llama.cpp and
// reads the picked experts' slices).
func BuildMoEToucher(t testing.TB) string { return buildC(t, "moetoucher") }

// BuildReader compiles testdata/reader (reads given byte ranges of a file
// with each read syscall and io_uring).
func BuildReader(t testing.TB) string { return buildC(t, "reader") }

// BuildExecMapper compiles testdata/execmapper (maps files executable
// from its main thread, a thread just started and one that ran a second).
func BuildExecMapper(t testing.TB) string { return buildC(t, "execmapper", "-pthread") }

// BuildMapChurn compiles testdata/mapchurn (maps files executable from
// its main thread while another thread maps and unmaps memory).
func BuildMapChurn(t testing.TB) string { return buildC(t, "mapchurn", "-pthread") }

// BuildBufNamer compiles testdata/bufnamer (names buffers through a
// ggml_backend_buffer_name whose strings lie in pages not yet mapped when
// it returns).
func BuildBufNamer(t testing.TB) string { return buildC(t, "bufnamer") }

// buildC compiles testdata/NAME/NAME.c with the system's C compiler,
// without debug info, and syncs it to disk before anything probes it;
// flags (headers, libraries) follow the source on cc's command line.
func buildC(t testing.TB, name string, flags ...string) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command("cc", append([]string{"-O1", "-Wall", "-o", bin, filepath.Join("testdata", name, name+".c")}, flags...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", name, err, out)
	}
	// A uprobe on a file whose blocks are not yet written hit a kernel
	// warning here once (LAB-NOTES): write it out first.
	f, err := os.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// ToucherReport is what the toucher prints.
type ToucherReport struct {
	Mapping    uint64  `json:"mapping"`
	PageSize   int     `json:"page_size"`
	Pages      []int64 `json:"pages"`
	Offsets    []int64 `json:"offsets"`
	Resident   int     `json:"resident_before"`
	EvictTries int     `json:"evict_tries"`
	MajFlt     int64   `json:"majflt"`
	MinFlt     int64   `json:"minflt"`
	Seed       *uint64 `json:"seed"`     // of the -random shuffle
	WokenBy    string  `json:"woken_by"` // what ended -wait: "stdin" or "SIGUSR1"
}
