package llmtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
)

// MoE is the model of the end-to-end tests that need expert picks under
// memory pressure: 8 layers of 8 experts, 2 picked per token, whose
// weights do not fit MemLimit, so experts are read from the disk again
// while tokens decode.
var MoE = gguf.SynthSpec{Layers: 8, Embd: 512, FF: 1024, Heads: 8, Experts: 8, ExpertsUsed: 2, Type: WeightType}

// PageableMoE is the small model of the tests that pick pages and byte
// ranges inside chosen experts: 2 layers of 4 experts (2 used), each
// expert slice of an *_exps tensor 256×512×2 B = 64 pages.
var PageableMoE = gguf.SynthSpec{Layers: 2, Embd: 256, FF: 512, Heads: 4, Experts: 4, ExpertsUsed: 2, Type: WeightType}

// MemLimit is the memory limit MoE is recorded under, as `iocorr record
// --mem-limit` and a sweep's budget name spell it; MemLimitBytes is the
// same in bytes.
const (
	MemLimit      = "112MiB"
	MemLimitBytes = 112 << 20
)

// CompletionArgs is the command line of llama-completion (bin, of a build
// CLI returns) generating n tokens on model non-interactively, greedily,
// without a warm-up run, on 2 threads: one llama_decode for the prompt,
// then one per further token.
func CompletionArgs(bin, model string, n int) []string {
	return []string{bin, "-m", model, "-p", "the quick brown fox", "-n", strconv.Itoa(n),
		"-no-cnv", "--no-warmup", "--ignore-eos", "-t", "2", "-c", "256", "--temp", "0"}
}

// Recorded is the run the end-to-end tests share: the driver generating
// Tokens tokens on MoE from a cold cache under MemLimit, recorded and
// ingested by `iocorr record`. Tests only read it.
type Recorded struct {
	Dir     string   // the run directory
	Model   string   // the model file
	Command []string // what was recorded
	Tokens  int
}

// RecordedTokens is how many tokens the shared run generates.
const RecordedTokens = 8

var recorded struct {
	once sync.Once
	run  Recorded
	err  error
}

// RecordedMoE returns the shared run, recording it at the first call of
// the test binary: `iocorr record -o DIR --cold --mem-limit MemLimit --
// node generate.mjs --model MODEL --tokens 8 --threads 2 --json`, with
// iocorr built from cmd/iocorr. It needs what Require and the tracer
// need; a failed recording fails every test that asks for it.
//
// The run directory outlives the test that made it (it is under
// os.TempDir, named for this process); a later test binary removes those
// whose process is gone.
func RecordedMoE(t testing.TB) Recorded {
	t.Helper()
	Require(t)
	model := Model(t, MoE)
	recorded.once.Do(func() { recorded.run, recorded.err = record(model) })
	if recorded.err != nil {
		t.Fatalf("recording the shared MoE run: %v", recorded.err)
	}
	return recorded.run
}

func record(model string) (Recorded, error) {
	pruneRecorded()
	root, err := Root()
	if err != nil {
		return Recorded{}, err
	}
	tmp, err := os.MkdirTemp("", fmt.Sprintf("iocorr-recorded-%d-", os.Getpid()))
	if err != nil {
		return Recorded{}, err
	}
	iocorr := filepath.Join(tmp, "iocorr")
	build := exec.Command("go", "build", "-o", iocorr, "./cmd/iocorr")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return Recorded{}, fmt.Errorf("building iocorr: %w\n%s", err, out)
	}
	// Named for its budget, as a sweep names its runs.
	dir := filepath.Join(tmp, MemLimit)
	cmd := Command(context.Background(), model, Generation{Tokens: RecordedTokens, Threads: 2, JSON: true})
	// The pagecache tier: the tests of the shared run check the residency
	// replayed from page-cache events, and the snapshots against it.
	args := append([]string{"record", "-o", dir, "--cold", "--mem-limit", MemLimit, "--probe", "pagecache", "--"}, cmd.Args...)
	var errb strings.Builder
	rec := exec.Command(iocorr, args...)
	// No disk profile whatever the machine keeps (iocorr doctor --disk):
	// the shared run's figures are then the same on every machine, its
	// device bandwidth NA saying so. recorder/ioshape_e2e_test.go records
	// with a profile of its own.
	rec.Env = append(os.Environ(), rundir.DiskProfilesEnv+"="+filepath.Join(tmp, "no-disk-profiles"))
	rec.Stderr = &errb
	if err := rec.Run(); err != nil {
		return Recorded{}, fmt.Errorf("iocorr %s: %w\n%s", strings.Join(args, " "), err, errb.String())
	}
	// Every test of the shared run compares it with an oracle: a run that
	// lost events says so here, once, instead of as a figure that is off.
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		return Recorded{}, err
	}
	for _, n := range meta.Lost {
		if n > 0 {
			return Recorded{}, fmt.Errorf("the shared run lost events (%v): the recorder did not drain its ring buffer in time (a busy machine?), so its figures are incomplete", meta.Lost)
		}
	}
	return Recorded{Dir: dir, Model: model, Command: cmd.Args, Tokens: RecordedTokens}, nil
}

// pruneRecorded removes the shared runs of test binaries that have ended.
func pruneRecorded() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "iocorr-recorded-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.SplitN(strings.TrimPrefix(filepath.Base(d), "iocorr-recorded-"), "-", 2)[0])
		if err != nil || pid == os.Getpid() {
			continue
		}
		if !running(pid) {
			os.RemoveAll(d)
		}
	}
}

// running reports whether process pid may still run: signal 0 only checks
// that it exists (a process of another user answers EPERM, and runs).
func running(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return !errors.Is(p.Signal(syscall.Signal(0)), os.ErrProcessDone)
}
