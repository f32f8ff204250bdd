// Package llmtest runs real llama.cpp — the prebuilt libraries of the npm
// package node-llama-cpp, driven by testdata/llm/generate.mjs — for tests
// and benchmarks, on synthetic models.
package llmtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

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

func installed() error {
	if _, err := exec.LookPath("node"); err != nil {
		return fmt.Errorf("node not found")
	}
	libs, _ := filepath.Glob(filepath.Join(LibDir(), "libllama*.so"))
	if len(libs) == 0 {
		return fmt.Errorf("node-llama-cpp is not installed in %s", filepath.Dir(Driver()))
	}
	return nil
}

// Require skips a test when real llama.cpp is not installed, unless CI or
// IOCORR_REQUIRE_LLAMA says it must run: then it fails.
func Require(t testing.TB) {
	t.Helper()
	if err := installed(); err != nil {
		if os.Getenv("IOCORR_REQUIRE_LLAMA") != "" || os.Getenv("CI") != "" {
			t.Fatalf("real llama.cpp is required: %v (run make setup)", err)
		}
		t.Skipf("real llama.cpp not available: %v (run make setup)", err)
	}
}

// Options of one generation.
type Options struct {
	Tokens  int
	Threads int
	Prompt  string
	Ctx     int
	Batch   int
	JSON    bool
}

// Command is the driver's command line; run it directly or under a tracer.
func Command(ctx context.Context, model string, o Options) *exec.Cmd {
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
	if o.JSON {
		args = append(args, "--json")
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
	PID                 int      `json:"pid"`
	LoadMS              float64  `json:"load_ms"`
	PromptTokens        int      `json:"prompt_tokens"`
	BatchSize           int      `json:"batch_size"`
	PromptBatches       int      `json:"prompt_batches"`
	Generated           int      `json:"generated"`
	DecodeCallsExpected int      `json:"decode_calls_expected"`
	EvalMS              float64  `json:"eval_ms"`
	TokensPerS          float64  `json:"tokens_per_s"`
	Libs                []string `json:"libs"`
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
func Generate(ctx context.Context, model string, o Options) (Result, error) {
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
	models   = map[string]string{}
	modelDir string
)

// Model writes a synthetic model for spec, once: tests share it. The file is on the real disk (not tmpfs), so that
// page-cache and block-device experiments on it are real.
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
		// Under the repository, which is on a real disk (os.TempDir may
		// be tmpfs elsewhere). A synth model is a pure function of its
		// spec, seed included, and is written atomically, so a file left
		// by an earlier run is the same model; `make clean` removes them.
		dir := filepath.Join(root, ".testmodels")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		modelDir = dir
	}
	sum := sha256.Sum256([]byte(key))
	p := filepath.Join(modelDir, hex.EncodeToString(sum[:8])+".gguf")
	if _, err := os.Stat(p); err != nil {
		if _, err := gguf.CreateSynth(p, spec); err != nil {
			t.Fatalf("writing model: %v", err)
		}
	}
	models[key] = p
	return p
}
