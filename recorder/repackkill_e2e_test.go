package recorder_test

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// TestRecordKilledAtLoadNamesTheRepackAndItsFlag records the routing
// oracle on a Q4_K_M model without --no-repack, cold under a limit below
// the repacked weights: llama.cpp's CPU backend copies them out of the
// model's mapping into its CPU_REPACK buffer (anonymous memory the limit
// charges and the page cache cannot evict), and the kernel kills it while
// it loads. The recording's warning names that buffer, what had been
// copied into it (no more than llama.cpp's log gives the buffer), the
// limit, and --no-repack; with --no-repack the same command under the
// same limit runs to its end.
func TestRecordKilledAtLoadNamesTheRepackAndItsFlag(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	oracle := llmtest.BuildRouteOracle(t)
	model := llmtest.Quantized(t, llmtest.Model(t, archSpec(gguf.ArchLlama)), "Q4_K_M")
	const limit = "16MiB"
	dir := filepath.Join(t.TempDir(), "run")
	rec, err := rectest.RecordErr(t.Context(), dir, rectest.Options{Cold: true, MemLimit: limit}, llmtest.RouteOracleArgs(oracle, model, archTokens, false)...)
	if err != nil {
		t.Fatalf("record: %v\n%s", err, rec.Stderr)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Child.Signal != "SIGKILL" {
		t.Fatalf("the command ended with %+v under %s, want SIGKILL at load\n%s", m.Child, limit, rec.Stderr)
	}
	bufMiB := 0.0
	if sm := regexp.MustCompile(`CPU_REPACK model buffer size = +([0-9.]+) MiB`).FindStringSubmatch(rec.Stderr); sm != nil {
		bufMiB, _ = strconv.ParseFloat(sm[1], 64)
	}
	if bufMiB == 0 {
		t.Fatalf("llama.cpp logged no CPU_REPACK buffer: the test needs a repacking CPU\n%s", rec.Stderr)
	}
	var killed string
	for _, w := range m.Warnings {
		if strings.Contains(w, "killed by SIGKILL") {
			killed = w
		}
	}
	copied := regexp.MustCompile(`CPU_REPACK ([0-9.]+) MiB in ([0-9]+) weights`).FindStringSubmatch(killed)
	if copied == nil || !strings.Contains(killed, "--no-repack") || !strings.Contains(killed, "under a "+limit+" memory limit") {
		t.Fatalf("the kill's warning does not name the repack buffer, the limit and --no-repack: %q", killed)
	}
	if mib, _ := strconv.ParseFloat(copied[1], 64); mib <= 0 || mib > bufMiB+0.05 {
		t.Errorf("%s MiB copied into CPU_REPACK, llama.cpp's buffer is %.2f MiB", copied[1], bufMiB)
	}
	t.Logf("killed at load: %s", killed)

	again := filepath.Join(t.TempDir(), "run")
	rec = rectest.Record(t, again, rectest.Options{Cold: true, MemLimit: limit}, llmtest.RouteOracleArgs(oracle, model, archTokens, true)...)
	if m, err = rundir.ReadMeta(again); err != nil {
		t.Fatal(err)
	}
	if m.Child.Signal != "" || m.Child.ExitCode != 0 {
		t.Fatalf("with --no-repack under %s: %+v\n%s", limit, m.Child, rec.Stderr)
	}
}
