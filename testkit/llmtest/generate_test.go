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

var countLine = regexp.MustCompile(`@calls\[(\d+)\]: (\d+)`)

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
		opts Generation
		want int // llama_decode calls, worked out by hand
	}{
		// The driver's default prompt is 33 tokens in synth's vocabulary
		// (the error message prints the count if that ever changes).
		{"one prompt batch", Generation{Tokens: 8}, 8},
		{"a single token", Generation{Tokens: 1}, 1},
		{"prompt exactly one batch", Generation{Tokens: 2, Batch: 33}, 2},
		{"prompt one token over a batch", Generation{Tokens: 2, Batch: 32}, 3},
		{"prompt in nine batches", Generation{Tokens: 5, Batch: 4}, 13},
		{"one-token prompt", Generation{Tokens: 3, Prompt: "a"}, 3},
		// End-of-generation tokens are fed back and decoded like any other.
		{"every token end-of-generation", Generation{Tokens: 6, OnlyEOG: true}, 6},
		{"seeded sampling", Generation{Tokens: 4, Seed: Seed(42)}, 4},
	}
	lib, err := LlamaLib()
	if err != nil {
		t.Fatal(err)
	}
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
			// A uprobe is on the library file, so it also fires in any
			// other process running llama.cpp from this tree: count per pid.
			prog := fmt.Sprintf(`uprobe:"%s":llama_decode { @calls[pid] = count(); }`, lib)
			out, err := exec.CommandContext(ctx, bt, "-q", "-e", prog, "-c", strings.Join(argv, " ")).CombinedOutput()
			if err != nil {
				t.Fatalf("bpftrace: %v\n%s", err, out)
			}
			res, err := ParseResult(out)
			if err != nil {
				t.Fatal(err)
			}
			got := -1
			for _, m := range countLine.FindAllSubmatch(out, -1) {
				if string(m[1]) == strconv.Itoa(res.PID) {
					got, _ = strconv.Atoi(string(m[2]))
				}
			}
			if got < 0 {
				t.Fatalf("no llama_decode count for pid %d in\n%s", res.PID, out)
			}
			if got != tc.want || res.DecodeCallsExpected != tc.want {
				t.Errorf("llama_decode called %d times, driver expected %d, want %d (prompt %d tokens in %d batches of %d, %d generated)",
					got, res.DecodeCallsExpected, tc.want, res.PromptTokens, res.PromptBatches, res.BatchSize, res.Generated)
			}
			if res.Generated != tc.opts.Tokens || len(res.TokenIDs) != tc.opts.Tokens {
				t.Errorf("generated %d tokens (%d ids), want %d", res.Generated, len(res.TokenIDs), tc.opts.Tokens)
			}
			if tc.opts.OnlyEOG && res.EOGTokens != res.Generated {
				t.Errorf("%d of %d tokens were end-of-generation, want all: %v", res.EOGTokens, res.Generated, res.TokenIDs)
			}
		})
	}
}

// TestSamplingIsRepeatable: a test that counts I/O per token needs the
// same tokens on every run, greedy or seeded; a different seed is a
// different run.
func TestSamplingIsRepeatable(t *testing.T) {
	Require(t)
	model := Model(t, gguf.SynthSpec{Layers: 1, Embd: 256, FF: 512, Heads: 4, Type: gguf.TypeF16})
	tests := []struct {
		name         string
		a, b         Generation
		wantSame     bool
		wantSampling float64 // temperature the driver reports
	}{
		{"greedy twice", Generation{}, Generation{}, true, 0},
		{"same seed twice", Generation{Seed: Seed(7)}, Generation{Seed: Seed(7)}, true, 0.8},
		{"same seed and temperature", Generation{Seed: Seed(7), Temperature: 1.5}, Generation{Seed: Seed(7), Temperature: 1.5}, true, 1.5},
		{"two seeds", Generation{Seed: Seed(7)}, Generation{Seed: Seed(8)}, false, 0.8},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var ids [2][]int
			for i, o := range []Generation{tc.a, tc.b} {
				o.Tokens, o.Threads = 16, 2
				res, err := Generate(ctx, model, o)
				if err != nil {
					t.Fatal(err)
				}
				if res.Temperature != tc.wantSampling {
					t.Errorf("driver sampled at temperature %v, want %v", res.Temperature, tc.wantSampling)
				}
				ids[i] = res.TokenIDs
			}
			if same := fmt.Sprint(ids[0]) == fmt.Sprint(ids[1]); same != tc.wantSame {
				t.Errorf("tokens %v and %v: same %v, want %v", ids[0], ids[1], same, tc.wantSame)
			}
		})
	}
}

// TestDriverRejectsBadArgumentsWithOneLine: a mistyped flag must say
// which, in one line, before any model is loaded.
func TestDriverRejectsBadArgumentsWithOneLine(t *testing.T) {
	Require(t)
	tests := []struct {
		name string
		args []string
		says string
	}{
		{"no model", []string{"--tokens", "3"}, "--model is required"},
		{"zero tokens", []string{"--model", "x.gguf", "--tokens", "0"}, "--tokens must be an integer"},
		{"fractional threads", []string{"--model", "x.gguf", "--threads", "1.5"}, "--threads must be an integer"},
		{"temperature without a seed", []string{"--model", "x.gguf", "--temperature", "0.7"}, "--temperature needs --seed"},
		{"seed out of range", []string{"--model", "x.gguf", "--seed", "4294967295"}, "--seed must be below"},
		{"unknown flag", []string{"--model", "x.gguf", "--top-k", "3"}, "top-k"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("node", append([]string{Driver()}, tc.args...)...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("driver accepted %v: %s", tc.args, out)
			}
			msg := strings.TrimSpace(string(out))
			if strings.Contains(msg, "\n") || !strings.Contains(msg, tc.says) {
				t.Errorf("driver said %q, want one line saying %q", msg, tc.says)
			}
		})
	}
}

func TestGenerateRejectsABadModelWithOneLine(t *testing.T) {
	Require(t)
	dir := t.TempDir()
	good := Model(t, gguf.SynthSpec{Layers: 1, Embd: 256, FF: 512, Heads: 4})
	head, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		content []byte // nil: no file at all
		says    string
	}{
		// (A file with a valid magic and a garbage header made llama.cpp's
		// own reader spin at 5.7 GB of memory: that is llama.cpp's to fix,
		// and iocorr's parser rejects it at once; so no such case here.)
		{"not a gguf", []byte("this is not a model\n"), "magic"},
		{"header cut short", head[:100], "failed to read"},
		{"missing file", nil, "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".gguf")
			if tc.content != nil {
				if err := os.WriteFile(bad, tc.content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := Generate(ctx, bad, Generation{Tokens: 2})
			if err == nil {
				t.Fatal("a bad model generated tokens")
			}
			msg := strings.TrimSpace(err.Error())
			if strings.Contains(msg, "\n") {
				t.Fatalf("error is not one line: %q", msg)
			}
			if !strings.Contains(msg, tc.says) {
				t.Errorf("error %q does not say %q", msg, tc.says)
			}
		})
	}
}
