package layers_test

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/iocorr/iocorr/"

// floor is each package's floor in ARCHITECTURE.md. A package imports
// only packages of lower floors; a new package must be given one here.
var floor = map[string]int{
	// 0: the data model and the ground facts, each decoded once.
	"event": 0, "gguf": 0,
	"internal/kernel": 0, "internal/units": 0, "internal/atomicfile": 0,
	"internal/procmaps": 0, "internal/elfinfo": 0, "internal/cgroup": 0,
	"internal/pagecache": 0, "internal/testenv": 0, "internal/layers": 0,
	"report/browsertest": 0,
	// 1: target knowledge (llama.cpp and ggml), no BPF.
	"ggml": 1, "internal/llmtest": 1,
	// 2: the run directory's metadata and its NA reasons.
	"rundir": 2,
	// 3–5: facts in the run's types, the loader, the decoder, the joins.
	"internal/blockdev": 3, "internal/proc": 3, "bpf": 3,
	"internal/launch": 4, "ingest": 4,
	"correlate": 5, "internal/spooltest": 5,
	// 6–7: the store, and what reads it.
	"index":    6,
	"pipeline": 7, "stats": 7, "perfetto": 7,
	// 8–10: the record lifecycle, the sweep, the renderers, the bench.
	"sweep": 8, "recorder": 8,
	"output": 9, "report": 9, "doctor": 9, "sweep/record": 9,
	"bench": 10,
	// 11: the commands.
	"cmd/iocorr": 11, "cmd/iocorr-bench": 11,
}

// readSide are the packages that read a store or a run directory and
// render it: none of them may link the BPF loader, its decoder, the
// correlator or cilium/ebpf, so a report or an export builds and runs
// where BPF does not.
var readSide = []string{"event", "index", "stats", "perfetto", "sweep", "output", "report", "rundir", "gguf"}

var writeSide = []string{module + "bpf", module + "ingest", module + "correlate", module + "pipeline", module + "recorder", "github.com/cilium/ebpf"}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			t.Fatalf("go list %v: %v\n%s", args, err, ee.Stderr)
		}
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

func TestEveryPackageImportsOnlyFromFloorsBelowItsOwn(t *testing.T) {
	for _, line := range goList(t, "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		own, ok := floor[pkg]
		if !ok {
			t.Errorf("package %s has no floor: give it one in this test and in ARCHITECTURE.md", pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			if f, ok := floor[dep]; ok && f >= own {
				t.Errorf("%s (floor %d) imports %s (floor %d): imports go down only", pkg, own, dep, f)
			}
		}
	}
}

func TestTheReadSideNeverLinksTheBPFLoader(t *testing.T) {
	for _, pkg := range readSide {
		for _, dep := range goList(t, "-deps", "./"+pkg) {
			for _, w := range writeSide {
				if dep == w || strings.HasPrefix(dep, w+"/") {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}
