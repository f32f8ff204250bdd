package rectest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// SmallerMoE is the second model of the comparisons: llmtest.MoE cut to
// 6 layers of 4 experts, so that layers 6-7, experts 4-7 and the tensors
// of layers 6-7 are only in the shared run's model.
var SmallerMoE = gguf.SynthSpec{Layers: 6, Embd: 512, FF: 1024, Heads: 8, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType}

// SmallerBudget keeps SmallerMoE (85 MiB) reading from the disk while it
// decodes.
const SmallerBudget = "64MiB"

var secondRun struct {
	once sync.Once
	dir  string
	err  error
}

// RecordedPair returns two real runs of different models: A, the shared
// run (llmtest.RecordedMoE: the Node driver on llmtest.MoE under 112 MiB),
// and B, llama-completion of the shared build generating 8 tokens on
// SmallerMoE under SmallerBudget, recorded once per test binary; and
// both models' files. The test binary must run launch.RunShimIfChild in
// its TestMain (see Record).
func RecordedPair(t testing.TB) (a, b, modelA, modelB string) {
	t.Helper()
	testenv.RequireBPF(t)
	llmtest.Require(t)
	rec := llmtest.RecordedMoE(t)
	modelB = llmtest.Model(t, SmallerMoE)
	bin := llmtest.CLI(t, llmtest.Shared, "llama-completion")
	secondRun.once.Do(func() {
		// Named as llmtest names its shared run, so that a later test
		// binary removes it once this process is gone.
		tmp, err := os.MkdirTemp("", fmt.Sprintf("iocorr-recorded-%d-", os.Getpid()))
		if err != nil {
			secondRun.err = err
			return
		}
		dir := filepath.Join(tmp, SmallerBudget)
		if out, err := RecordErr(context.Background(), dir, Options{Cold: true, MemLimit: SmallerBudget}, llmtest.CompletionArgs(bin, modelB, 8)...); err != nil {
			secondRun.err = fmt.Errorf("record: %w\n%s", err, out.Stderr)
			return
		}
		secondRun.dir = dir
	})
	if secondRun.err != nil {
		t.Fatalf("recording the second run: %v", secondRun.err)
	}
	return rec.Dir, secondRun.dir, rec.Model, modelB
}

// TensorNames are the tensor names of a GGUF file.
func TensorNames(t testing.TB, path string) map[string]bool {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tn := range f.Tensors {
		names[tn.Name] = true
	}
	return names
}
