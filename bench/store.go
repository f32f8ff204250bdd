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

	"github.com/iocorr/iocorr/sweep"
)

// Store adds the store's figures from the store package's own Go
// benchmarks, which generate the synthetic 10 M-event run (1 M with
// -short) once into a directory both use: BenchmarkIngest's events/s, one
// build per -count, and BenchmarkQueryTensor's time per query (open,
// query, close) from ns/op, the mean of 20 queries per -count.
func Store(r *Report, cfg Config) {
	const sec = "store"
	count, events := 3, "10M"
	if cfg.Short {
		count, events = 1, "1M"
	}
	out, err := goBench(cfg, "BenchmarkIngest", "1x", count, events)
	name := fmt.Sprintf("ingest rate (%s-event synthetic run)", events)
	if err != nil {
		r.NA(sec, name, "records/s", orNA(err))
	} else {
		r.Add(sec, name, "records/s", metric(out, "BenchmarkIngest", "events/s"), "go test printed no events/s")
	}
	out, err = goBench(cfg, "BenchmarkQueryTensor", "20x", count, events)
	name = fmt.Sprintf("query --tensor latency (%s-event run, open+query+close, mean of 20)", events)
	if err != nil {
		r.NA(sec, name, "ms", orNA(err))
		return
	}
	ns := metric(out, "BenchmarkQueryTensor", "ns/op")
	for i := range ns {
		ns[i] /= 1e6
	}
	r.Add(sec, name, "ms", ns, "go test printed no ns/op")
}

// goBench runs one benchmark of the store package.
func goBench(cfg Config, bench, benchtime string, count int, events string) ([]byte, error) {
	args := []string{"test", "-run", "^$", "-bench", "^" + bench + "$", "-benchtime", benchtime, "-count", strconv.Itoa(count), "-timeout", "30m"}
	if cfg.Short {
		args = append(args, "-short")
	}
	args = append(args, "./store")
	logf(cfg, "go %s", strings.Join(args, " "))
	cmd := exec.Command("go", args...)
	cmd.Dir = cfg.Repo
	cmd.Env = append(os.Environ(), "IOCORR_BENCH_DIR="+filepath.Join(cfg.WorkDir, "synth-run-"+events))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("go test -bench %s: %w: %s", bench, err, sweep.LastLine(out))
	}
	return out, nil
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
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestToucherFaultsAreExactPerTensorAndExpert$", "-v", "./recorder")
	cmd.Dir = cfg.Repo
	cmd.Env = append(os.Environ(), "IOCORR_REQUIRE_BPF=1")
	out, err := cmd.CombinedOutput()
	switch {
	case bytes.Contains(out, []byte("--- PASS: TestToucherFaultsAreExactPerTensorAndExpert")):
		r.Add("fidelity", name, "passed/run", []float64{1}, "")
	case bytes.Contains(out, []byte("--- FAIL: TestToucherFaultsAreExactPerTensorAndExpert")):
		r.Add("fidelity", name, "passed/run", []float64{0}, "")
	default:
		r.NA("fidelity", name, "passed/run", fmt.Sprintf("go test: %v: %s", err, sweep.LastLine(out)))
	}
}
