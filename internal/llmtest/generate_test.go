package llmtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/gguf"
)

// requireBpftrace skips without root or bpftrace, unless
// IOCORR_REQUIRE_BPF says the machine must be able to trace.
func requireBpftrace(t *testing.T) string {
	t.Helper()
	bt, err := exec.LookPath("bpftrace")
	if err == nil && os.Geteuid() != 0 {
		err = fmt.Errorf("not root")
	}
	if err != nil {
		if os.Getenv("IOCORR_REQUIRE_BPF") != "" {
			t.Fatalf("bpftrace is required: %v (run make setup as root)", err)
		}
		t.Skipf("no bpftrace: %v", err)
	}
	return bt
}

var countLine = regexp.MustCompile(`@calls: (\d+)`)

// TestDriverPredictsItsLlamaDecodeCalls counts llama_decode with
// bpftrace — a tracer independent of iocorr's own — and checks the
// driver's decode_calls_expected, ceil(prompt/batch) + tokens - 1, on
// prompts that take one batch, exactly one batch, and many batches.
func TestDriverPredictsItsLlamaDecodeCalls(t *testing.T) {
	Require(t)
	bt := requireBpftrace(t)
	model := Model(t, gguf.SynthSpec{Layers: 1, Embd: 256, FF: 512, Heads: 4, Type: gguf.TypeF16})
	tests := []struct {
		name string
		opts Options
		want int // llama_decode calls, worked out by hand
	}{
		// The driver's default prompt is 33 tokens in synth's vocabulary
		// (the error message prints the count if that ever changes).
		{"one prompt batch", Options{Tokens: 8}, 8},
		{"a single token", Options{Tokens: 1}, 1},
		{"prompt exactly one batch", Options{Tokens: 2, Batch: 33}, 2},
		{"prompt one token over a batch", Options{Tokens: 2, Batch: 32}, 3},
		{"prompt in nine batches", Options{Tokens: 5, Batch: 4}, 13},
		{"one-token prompt", Options{Tokens: 3, Prompt: "a"}, 3},
	}
	libs, _ := filepath.Glob(filepath.Join(LibDir(), "libllama.*so"))
	if len(libs) != 1 {
		t.Fatalf("want one libllama in %s, found %v", LibDir(), libs)
	}
	lib := libs[0]
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Threads = 2
			tc.opts.JSON = true
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := Command(ctx, model, tc.opts)
			// bpftrace -c splits its command on spaces and wants the
			// binary's real path.
			argv := append([]string{cmd.Path}, cmd.Args[1:]...)
			for _, a := range argv {
				if strings.ContainsAny(a, " \t") {
					t.Skipf("argument %q has a space, which bpftrace -c cannot pass", a)
				}
			}
			prog := fmt.Sprintf(`uprobe:"%s":llama_decode { @calls = count(); }`, lib)
			out, err := exec.CommandContext(ctx, bt, "-q", "-e", prog, "-c", strings.Join(argv, " ")).CombinedOutput()
			if err != nil {
				t.Fatalf("bpftrace: %v\n%s", err, out)
			}
			res, err := ParseResult(out)
			if err != nil {
				t.Fatal(err)
			}
			m := countLine.FindSubmatch(out)
			if m == nil {
				t.Fatalf("no llama_decode count in\n%s", out)
			}
			got, _ := strconv.Atoi(string(m[1]))
			if got != tc.want || res.DecodeCallsExpected != tc.want {
				t.Errorf("llama_decode called %d times, driver expected %d, want %d (prompt %d tokens in %d batches of %d, %d generated)",
					got, res.DecodeCallsExpected, tc.want, res.PromptTokens, res.PromptBatches, res.BatchSize, res.Generated)
			}
			if res.Generated != tc.opts.Tokens {
				t.Errorf("generated %d tokens, want %d", res.Generated, tc.opts.Tokens)
			}
		})
	}
}
