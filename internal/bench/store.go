package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// Store adds the store's figures from the index package's own Go
// benchmarks (BenchmarkIngest, BenchmarkQueryTensor), which generate the
// synthetic 10 M-event run (1 M with -short): their metrics are the
// figures, one sample per -count.
func Store(r *Report, cfg Config) {
	const sec = "store"
	count, events := 3, "10M"
	args := []string{"test", "-run", "^$", "-bench", "^(BenchmarkIngest|BenchmarkQueryTensor)$", "-benchtime", "1x", "-timeout", "30m"}
	if cfg.Short {
		count, events = 1, "1M"
		args = append(args, "-short")
	}
	args = append(args, "-count", strconv.Itoa(count), "./index")
	logf(cfg, "go %s", strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	cmd.Dir = cfg.Repo
	// One generated run serves both benchmarks and every count.
	cmd.Env = append(os.Environ(), "IOCORR_BENCH_DIR="+filepath.Join(cfg.WorkDir, "synth-run-"+events))
	out, err := cmd.CombinedOutput()
	ingestName := fmt.Sprintf("ingest rate (%s-event synthetic run)", events)
	queryName := fmt.Sprintf("query --tensor latency (%s-event run, open+query+close)", events)
	if err != nil {
		r.NA(sec, ingestName, "records/s", fmt.Sprintf("go test -bench: %v: %s", err, lastLine(out)))
		r.NA(sec, queryName, "ms", "go test -bench failed")
		return
	}
	r.Add(sec, ingestName, "records/s", metric(out, "BenchmarkIngest", "events/s"), "go test printed no events/s")
	r.Add(sec, queryName, "ms", metric(out, "BenchmarkQueryTensor", "ms/query"), "go test printed no ms/query")
}

// metric collects one reported metric of one benchmark from go test's
// output, a sample per line.
func metric(out []byte, bench, unit string) []float64 {
	re := regexp.MustCompile(`^` + bench + `(-\d+)?\s`)
	var vs []float64
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !re.MatchString(line) {
			continue
		}
		f := strings.Fields(line)
		for i := 1; i < len(f); i++ {
			if f[i] == unit {
				if v, err := strconv.ParseFloat(f[i-1], 64); err == nil {
					vs = append(vs, v)
				}
			}
		}
	}
	return vs
}

// Toucher runs the ground-truth test of attribution, a program touching a
// known list of cold pages (each must be exactly one recorded major fault,
// charged to the tensor and expert that holds it), and reports whether it
// was exact.
func Toucher(r *Report, cfg Config) {
	const name = "toucher exact: faults at the touched offsets, charged per tensor/expert"
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestToucherFaultsAreExactPerTensorAndExpert$", "-v", "./cmd/iocorr")
	cmd.Dir = cfg.Repo
	cmd.Env = append(os.Environ(), "IOCORR_REQUIRE_BPF=1")
	out, err := cmd.CombinedOutput()
	switch {
	case bytes.Contains(out, []byte("--- PASS: TestToucherFaultsAreExactPerTensorAndExpert")):
		r.Add("fidelity", name, "passed/run", []float64{1}, "")
	case bytes.Contains(out, []byte("--- FAIL: TestToucherFaultsAreExactPerTensorAndExpert")):
		r.Add("fidelity", name, "passed/run", []float64{0}, "")
	default:
		r.NA("fidelity", name, "passed/run", fmt.Sprintf("go test: %v: %s", err, lastLine(out)))
	}
}
