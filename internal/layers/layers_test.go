package layers_test

import (
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/iocorr/iocorr/"

// floor is each package's floor in ARCHITECTURE.md. A package imports
// only packages of lower floors; a new package must be given one here.
var floor = map[string]int{
	// 0: the ground facts, each decoded once.
	"internal/kernel": 0, "internal/units": 0, "internal/atomicfile": 0,
	"internal/procmaps": 0, "internal/elfinfo": 0, "internal/cgroup": 0, "internal/tracefs": 0,
	"internal/pagecache": 0, "testkit/testenv": 0, "internal/layers": 0,
	"internal/extsort":     0,
	"internal/varint":      0,
	"internal/protowalk":   0,
	"testkit/browsertest":  0,
	"testkit/ducktest":     0,
	"testkit/perfettotest": 1,
	// 1: the data model, the model file format, the BPF records; the
	// machine's facts, read in the kernel's shapes (internal/kernel's),
	// and the held child and helpers that record starts.
	"event": 1, "gguf": 1, "wire": 1, "internal/blockdev": 1, "internal/proc": 1,
	"internal/launch": 2, "testkit/blocktrace": 2,
	// 2: target knowledge (llama.cpp and ggml), no BPF; the spool and its
	// decoding.
	"ggml": 2, "ingest": 2,
	// 3: the run directory's metadata and its NA reasons.
	"rundir": 3,
	// 4–6: the loader (and its generator of the wire types), the joins.
	"bpf": 4, "bpf/internal/wiregen": 4, "testkit/llmtest": 4,
	"testkit/bpftest": 5,
	"correlate":       6, "testkit/spooltest": 6,
	// 7–8: the store, and what reads it.
	"store":    7,
	"pipeline": 8, "stats": 8, "perfetto": 8, "testkit/storetest": 8,
	"testkit/runtest": 9,
	// 9–11: the record lifecycle, the sweep, the renderers, the bench.
	"sweep": 9, "recorder": 9, "diff": 9,
	"output": 10, "report": 10, "doctor": 10, "recorder/sweeprun": 10, "testkit/rectest": 10,
	"bench": 11, "dataset": 11,
	"pin": 6, "prefetch": 6, "predict": 9, // plan.json and its holder (write side, no BPF); the page-cache predictor (read side)
	// 12: the commands.
	"cmd/iocorr": 12, "cmd/iocorr-bench": 12,
}

// readSide are the packages that read a store or a run directory and
// render it: none of them may link the BPF loader, its decoder, the
// correlator or cilium/ebpf, so a report or an export builds and runs
// where BPF does not.
var readSide = []string{"event", "store", "stats", "perfetto", "sweep", "output", "report", "rundir", "gguf", "diff", "predict", "dataset"}

// offline are the packages that turn a recorded spool into a store: they
// read the records the loader wrote, never the loader, so a run recorded
// on Linux is ingested anywhere (testkit/runtest writes such a spool and
// ingests it, for the read side's tests there).
var offline = []string{"wire", "ingest", "correlate", "pipeline", "testkit/runtest"}

var loader = []string{module + "bpf", module + "recorder", "github.com/cilium/ebpf"}

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
	requireNoLinks(t, readSide, writeSide)
}

func TestTheIngestPathNeverLinksTheBPFLoader(t *testing.T) {
	requireNoLinks(t, offline, loader)
}

// requireNoLinks fails for each package of pkgs that links one of
// forbidden (a package or anything below it).
func requireNoLinks(t *testing.T, pkgs, forbidden []string) {
	t.Helper()
	for _, pkg := range pkgs {
		for _, dep := range goList(t, "-deps", "./"+pkg) {
			for _, w := range forbidden {
				if dep == w || strings.HasPrefix(dep, w+"/") {
					t.Errorf("%s links %s", pkg, dep)
				}
			}
		}
	}
}

// crossPkgs are the packages `make cross` vets, tests included, for macOS
// and Windows: the Makefile's CROSS_PKGS.
func crossPkgs(t *testing.T) []string {
	t.Helper()
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CROSS_PKGS\s*:=((?:.*\\\n)*.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no CROSS_PKGS")
	}
	return strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " "))
}

// What reads a run and what ingests one build, with their tests, wherever
// a run is copied to: `make cross` vets each of them for macOS and Windows.
func TestMakeCrossVetsTheReadSideAndTheIngest(t *testing.T) {
	cross := crossPkgs(t)
	for _, pkg := range append(slices.Clone(readSide), offline...) {
		if !slices.Contains(cross, "./"+pkg) {
			t.Errorf("%s is not in the Makefile's CROSS_PKGS: make cross would not vet it for macOS and Windows", pkg)
		}
	}
}
