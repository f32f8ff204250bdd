package llmtest

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/gguf"
)

// TestDriverRunsEachVersionOnItsOwnLibraries runs the driver with every
// node-llama-cpp of the version matrix: each generates the tokens asked
// for, and the process maps only that version's prebuilt libllama and
// libggml (a mix of two versions' libraries would trace the wrong build).
func TestDriverRunsEachVersionOnItsOwnLibraries(t *testing.T) {
	model := Model(t, gguf.SynthSpec{Layers: 2, Embd: 256, FF: 256, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: WeightType})
	for _, v := range Versions {
		t.Run(v.NodeLlamaCpp, func(t *testing.T) {
			RequireVersion(t, v.NodeLlamaCpp)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			r, err := Generate(ctx, model, Generation{Tokens: 3, Version: v.NodeLlamaCpp})
			if err != nil {
				t.Fatal(err)
			}
			if r.Generated != 3 || r.DecodeCallsExpected != r.PromptBatches+2 {
				t.Errorf("generated %d tokens in %d llama_decode calls, want 3 in %d", r.Generated, r.DecodeCallsExpected, r.PromptBatches+2)
			}
			// /proc/self/maps names files by their real path; a checkout may
			// reach node_modules through a symlink.
			want, err := filepath.EvalSymlinks(VersionLibDir(v.NodeLlamaCpp))
			if err != nil {
				t.Fatal(err)
			}
			var llama, base bool
			for _, lib := range r.Libs {
				if filepath.Dir(lib) != want {
					t.Errorf("mapped %s, not from %s", lib, want)
				}
				llama = llama || strings.HasPrefix(filepath.Base(lib), "libllama")
				base = base || filepath.Base(lib) == "libggml-base.so"
			}
			if !llama || !base {
				t.Errorf("libllama or libggml-base not mapped: %v", r.Libs)
			}
		})
	}
}

// TestDriverRefusesAVersionNotInstalled: a version that is not in
// versions/ (or is not a version at all) is a one-line error, not a
// fallback to the default node-llama-cpp.
func TestDriverRefusesAVersionNotInstalled(t *testing.T) {
	Require(t)
	model := Model(t, gguf.SynthSpec{Layers: 1, Embd: 256, FF: 256, Heads: 4, Type: WeightType})
	for _, v := range []string{"9.9.9", "../..", "3.3.0/x"} {
		_, err := Generate(context.Background(), model, Generation{Tokens: 1, Version: v})
		if err == nil || !strings.Contains(err.Error(), "--llama-version") && !strings.Contains(err.Error(), "is not installed") {
			t.Errorf("version %q: %v, want an error naming the version", v, err)
		}
	}
}
