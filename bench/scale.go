package bench

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// scaleBound is issue 16's bound on every store command's peak RSS, MiB.
const scaleBound = 256

// scaleCommand is one command the scale section runs on a run directory,
// writing into out.
type scaleCommand struct {
	name string
	args func(dir, out string) []string
}

// scaleCommands build a run's store and read all of it, in every output
// format (stats as its tables; its JSON adds the token × tensor residency
// table, which grows with tokens by design).
var scaleCommands = []scaleCommand{
	{"ingest", func(dir, _ string) []string { return []string{"ingest", "--force", dir} }},
	{"query --by layer", func(dir, _ string) []string { return []string{"query", "-i", dir, "--by", "layer"} }},
	{"stats", func(dir, _ string) []string { return []string{"stats", "-i", dir} }},
	{"report", func(dir, out string) []string {
		return []string{"report", "-i", dir, "-o", filepath.Join(out, "report.html")}
	}},
	{"export events csv", func(dir, out string) []string {
		return []string{"export", "-i", dir, "events", "-o", filepath.Join(out, "events.csv")}
	}},
	{"export events parquet", func(dir, out string) []string {
		return []string{"export", "-i", dir, "events", "--format", "parquet", "-o", filepath.Join(out, "events.parquet")}
	}},
	{"export perfetto", func(dir, out string) []string {
		return []string{"export", "-i", dir, "perfetto", "-o", filepath.Join(out, "trace.pftrace")}
	}},
}

// scaleRun is what one run length measured.
type scaleRun struct {
	tokens  int
	records float64
	store   float64 // MiB
	trace   float64 // MiB of the Perfetto trace
	rss     []float64
	secs    []float64
}

// Scale records llama-bench on the model cold under the memory limit at
// each of cfg.ScaleTokens run lengths, builds and reads each run's store
// with every command in a child of its own (peak RSS from wait4's maxrss,
// wall time), and adds, per length, the records, the store's size and
// each command's figures, then each command's growth per record between
// the shortest and the longest run: a command that holds the run's events
// grows by their size, one that streams does not.
func Scale(r *Report, cfg Config, model string) {
	const sec = "scale"
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	var runs []scaleRun
	for _, n := range cfg.ScaleTokens {
		sr, err := scaleOne(cfg, model, n)
		if err != nil {
			r.NA(sec, fmt.Sprintf("run of %d tokens", n), "", orNA(err))
			return
		}
		runs = append(runs, sr)
		r.Add(sec, fmt.Sprintf("records, %d tokens", n), "count", []float64{sr.records}, "")
		r.Add(sec, fmt.Sprintf("store size, %d tokens", n), "MiB", []float64{sr.store}, "")
		r.Add(sec, fmt.Sprintf("perfetto trace, %d tokens", n), "bytes/record", []float64{sr.trace * (1 << 20) / sr.records}, "")
		for i, c := range scaleCommands {
			r.Add(sec, fmt.Sprintf("%s peak RSS, %d tokens", c.name, n), "MiB", []float64{sr.rss[i]}, "")
			r.goal("<=", scaleBound, "max")
			r.Add(sec, fmt.Sprintf("%s time, %d tokens", c.name, n), "s", []float64{sr.secs[i]}, "")
		}
	}
	if len(runs) < 2 {
		return
	}
	a, b := runs[0], runs[len(runs)-1]
	span := fmt.Sprintf("%d -> %d tokens", a.tokens, b.tokens)
	if b.records <= a.records {
		r.NA(sec, "growth per record, "+span, "", fmt.Sprintf("the longer run has no more records (%.0f, %.0f)", a.records, b.records))
		return
	}
	d := b.records - a.records
	for i, c := range scaleCommands {
		r.Add(sec, fmt.Sprintf("%s peak RSS growth, %s", c.name, span), "bytes/record", []float64{(b.rss[i] - a.rss[i]) * (1 << 20) / d}, "")
		r.Add(sec, fmt.Sprintf("%s time per record, %s", c.name, span), "us/record", []float64{(b.secs[i] - a.secs[i]) * 1e6 / d}, "")
	}
}

// scaleOne records one run of n tokens and runs every command on it.
func scaleOne(cfg Config, model string, n int) (scaleRun, error) {
	sr := scaleRun{tokens: n}
	dir := filepath.Join(cfg.WorkDir, fmt.Sprintf("scale-%d", n))
	out := filepath.Join(cfg.WorkDir, fmt.Sprintf("scale-%d-out", n))
	rc := cfg
	rc.Tokens = n
	logf(cfg, "scale: recording %d tokens cold under %d MiB", n, cfg.MemLimit>>20)
	if _, err := traced(rc, model, Arm{Name: "scale", Cold: true}, dir); err != nil {
		return sr, err
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		return sr, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return sr, err
	}
	for _, c := range m.Counts {
		sr.records += float64(c)
	}
	for _, c := range scaleCommands {
		logf(cfg, "scale: %d tokens: iocorr %s", n, c.name)
		rss, secs, err := child(cfg, c.args(dir, out)...)
		if err != nil {
			return sr, err
		}
		sr.rss, sr.secs = append(sr.rss, rss), append(sr.secs, secs)
	}
	if sr.store, err = dirMiB(filepath.Join(dir, rundir.DBDir)); err != nil {
		return sr, err
	}
	sr.trace, err = dirMiB(filepath.Join(out, "trace.pftrace"))
	return sr, err
}

// child runs iocorr ARGS and returns its peak RSS (MiB, wait4's maxrss)
// and wall time (s). The kernel carries a parent's high-water mark into
// its exec'd child's maxrss; the bench is a small process, far below any
// of these commands, so the figure is the command's.
func child(cfg Config, args ...string) (float64, float64, error) {
	cmd := exec.Command(cfg.Iocorr, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, 0, fmt.Errorf("iocorr %s: %w: %s", args[0], err, sweep.LastLine(errb.Bytes()))
	}
	secs := time.Since(start).Seconds()
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return float64(ru.Maxrss) / 1024, secs, nil // maxrss is in KiB
}

// dirMiB is the size of a file, or of the files under a directory, in MiB.
func dirMiB(path string) (float64, error) {
	var n int64
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			n += fi.Size()
		}
		return nil
	})
	return float64(n) / (1 << 20), err
}
