package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// cpuHasAMX reads the oracle from the CPU itself: ggml's CPU backend
// offers its AMX buffer only where the CPU has AMX-INT8 (Sapphire Rapids
// and later), and that buffer takes F16 mat-mul weights whose rows are a
// multiple of 32 wide.
func cpuHasAMX(t *testing.T) bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			return strings.Contains(" "+line+" ", " amx_int8 ")
		}
	}
	return false
}

func TestIngestSaysWhichWeightsLlamaCppCopiedOutOfTheModelFile(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4, Type: gguf.TypeF16})
	dir, _, _ := recordLlama(t, model, 2)
	_, errOut, err := runCmd(t, "ingest", dir)
	if err != nil {
		t.Fatalf("ingest: %v\n%s", err, errOut)
	}
	warned := strings.Contains(errOut, "read from anonymous memory, not the model file")
	if !cpuHasAMX(t) {
		if warned {
			t.Fatalf("no AMX here, yet iocorr says weights left the file:\n%s", errOut)
		}
		return
	}
	if !warned || !strings.Contains(errOut, "AMX") {
		t.Fatalf("on this AMX CPU F16 mat-mul weights live in ggml's AMX buffer, and ingest did not say so:\n%s", errOut)
	}
	// Mat-mul weights moved; the embedding table, read by GET_ROWS, stays.
	for _, name := range []string{"blk.0.attn_q.weight", "blk.1.ffn_down.weight", "output.weight"} {
		if !strings.Contains(errOut, name) {
			t.Errorf("warning does not name %s:\n%s", name, errOut)
		}
	}
	if strings.Contains(errOut, "token_embd.weight") {
		t.Errorf("token_embd.weight is read from the file by GET_ROWS, yet named:\n%s", errOut)
	}
}

// recordLlama records the Node driver generating tokens on a model and
// returns the run directory and the driver's own report.
func recordLlama(t *testing.T, model string, tokens int, extra ...string) (string, map[string]any, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	cmd := llmtest.Command(context.Background(), model, llmtest.Generation{Tokens: tokens, Threads: 2, JSON: true})
	args := append([]string{"record", "-o", dir, "--no-ingest"}, extra...)
	args = append(append(args, "--"), cmd.Args...)
	out, errOut, err := runCmd(t, args...)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, errOut)
	}
	var report map[string]any
	if i := strings.LastIndex(strings.TrimSpace(out), "\n{"); i >= 0 {
		out = out[i+1:]
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &report); err != nil {
		t.Fatalf("driver output %q: %v", out, err)
	}
	return dir, report, errOut
}
