package bench

import (
	"os"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The untraced runs are launched held: the test binary is their shim.
func TestMain(m *testing.M) {
	launch.RunShimIfChild()
	os.Exit(m.Run())
}

// The untraced arm is comparable with `record --cold --mem-limit` only if
// it runs under the same conditions: a cold run under the limit must read
// the model from the disk more than once, a warm run in RAM next to
// nothing.
func TestUntracedRunsRereadTheModelOnlyWhenColdUnderTheLimit(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := Config{
		LlamaBench: llmtest.CLI(t, llmtest.Shared, "llama-bench"),
		Tokens:     2, Threads: 2, MemLimit: 128 << 20,
	}
	// The demo's model: larger than the limit, BF16 so that its weights
	// stay file-backed.
	model := llmtest.Model(t, gguf.SynthSpec{Layers: 8, Embd: 768, FF: 1024, Heads: 12, Experts: 8, ExpertsUsed: 2, Type: llmtest.WeightType})
	st, err := os.Stat(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := warm(model); err != nil {
		t.Fatal(err)
	}
	w, err := untraced(cfg, model, Arm{})
	if err != nil {
		t.Fatal(err)
	}
	// A warm run may still read a few pages of its libraries or of the
	// launcher (other processes on the machine evict them), never the
	// model: a tenth of it is far above the one and far below the other.
	if w.read >= st.Size()/10 || w.tokPerS <= 0 || w.cpu <= 0 {
		t.Errorf("warm run in RAM: read %d bytes, %v tokens/s, %v s CPU; want under a tenth of the model and positive speed and CPU", w.read, w.tokPerS, w.cpu)
	}
	c, err := untraced(cfg, model, Arm{Cold: true})
	if err != nil {
		t.Fatal(err)
	}
	// Evicted but not limited, it would read the model once; limited but
	// not evicted, not at all (a cgroup is not charged pages cached
	// before it): only both make it read the model again and again.
	if c.read < 2*st.Size() {
		t.Errorf("cold run under %d MiB read %d bytes of a %d-byte model, want at least twice the model", cfg.MemLimit>>20, c.read, st.Size())
	}
	t.Logf("warm %.1f tokens/s, cold %.1f tokens/s reading %d MiB", w.tokPerS, c.tokPerS, c.read>>20)
}
