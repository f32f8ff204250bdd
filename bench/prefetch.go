package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// The prefetch section (issue 39): `iocorr prefetch` against the same
// command run plainly, cold under the same budget, in interleaved pairs,
// on the demo MoE, the skewed router and a near-uniform qwen3moe model, at
// two budgets each. Each pair gives the ratios of decode tokens/s (as
// llama.cpp reports them) and of the bytes the model's disk read; each
// run its I/O stall share, and each prefetched run the share of what it
// asked for that arrived before use and the prefetcher's own CPU (its
// helper's and iocorr's on the picks) against the whole run's.

const prefetchSection = "prefetch"

// prefetchCase is one model at its two budgets.
type prefetchCase struct {
	name    string
	model   func(Config) (string, error)
	budgets []string
}

func prefetchCases() []prefetchCase {
	synth := func(file string, flags ...string) func(Config) (string, error) {
		return func(cfg Config) (string, error) { return synthModel(cfg, file, flags...) }
	}
	return []prefetchCase{
		{"demo MoE", Model, []string{"96MiB", "160MiB"}},
		// predictSkew's model: 614 MiB, its hot experts re-read each token
		// at 192 MiB.
		{"skewed router", synth("skewed.gguf", "--layers", "8", "--embd", "768", "--ff", "2048", "--heads", "12",
			"--experts", "8", "--experts-used", "2", "--type", "bf16", "--router-skew", "2"), []string{"192MiB", "320MiB"}},
		{"qwen3moe (near-uniform router)", synth("qwen3moe.gguf", "--arch", "qwen3moe", "--layers", "8", "--embd", "768", "--ff", "1024",
			"--heads", "12", "--experts", "8", "--experts-used", "2", "--type", "bf16"), []string{"96MiB", "160MiB"}},
	}
}

// prefetchRun is what one run measured.
type prefetchRun struct {
	tps      float64
	read     float64 // bytes the model's disk read
	stall    float64 // PSI io "some" time ÷ wall time
	cpu      float64 // seconds, every process of the run
	arrived  *float64
	ownCPU   *float64 // the prefetcher's seconds
	stallErr string
}

func (p prefetchRun) String() string {
	s := fmt.Sprintf("%.2f tok/s, %.0f MB read, stall share %.3f, CPU %.2f s", p.tps, p.read/1e6, p.stall, p.cpu)
	if p.arrived != nil {
		s += fmt.Sprintf(", arrived %.3f", *p.arrived)
	}
	if p.ownCPU != nil {
		s += fmt.Sprintf(", prefetcher CPU %.3f s", *p.ownCPU)
	}
	return s
}

// Prefetch adds the section's figures.
func Prefetch(r *Report, cfg Config) {
	cases := prefetchCases()
	if cfg.Short {
		// Proves the section works: one model, one budget, one pair.
		cases = []prefetchCase{{cases[0].name, cases[0].model, cases[0].budgets[:1]}}
	}
	for _, c := range cases {
		model, err := c.model(cfg)
		if err != nil {
			r.NA(prefetchSection, c.name, "", orNA(err))
			continue
		}
		for _, b := range c.budgets {
			prefetchPairs(r, cfg, c.name+" at "+b, model, b)
		}
	}
}

// prefetchPairs runs the pairs of one model at one budget.
func prefetchPairs(r *Report, cfg Config, name, model, budget string) {
	argv := cfg.completionArgv(model)
	var plain, pf []prefetchRun
	pairs := predictRepeats(cfg)
	for i := range pairs {
		for k := range 2 {
			var run prefetchRun
			var err error
			if (i+k)%2 == 0 {
				run, err = again(cfg, func() (prefetchRun, error) { return plainPrefetchRun(cfg, argv, model, budget) })
				if err == nil {
					plain = append(plain, run)
				}
			} else {
				report := filepath.Join(cfg.WorkDir, "prefetch", fmt.Sprintf("%s-%d.json", strings.ReplaceAll(name, " ", "_"), i))
				run, err = again(cfg, func() (prefetchRun, error) { return prefetchedRun(cfg, argv, model, budget, report) })
				if err == nil {
					pf = append(pf, run)
				}
			}
			if err != nil {
				r.NA(prefetchSection, name+": prefetch ÷ plain decode tokens/s", "ratio", orNA(err))
				return
			}
			logf(cfg, "prefetch %s round %d: %s", name, i, run)
		}
	}
	var tps, read, arrived, own, stallP, stallQ []float64
	var stallNA string
	for i := range min(len(plain), len(pf)) {
		tps = append(tps, pf[i].tps/plain[i].tps)
		if plain[i].read > 0 {
			read = append(read, pf[i].read/plain[i].read)
		}
		if pf[i].arrived != nil {
			arrived = append(arrived, *pf[i].arrived)
		}
		if pf[i].ownCPU != nil && pf[i].cpu > 0 {
			own = append(own, *pf[i].ownCPU/pf[i].cpu)
		}
		if plain[i].stallErr != "" || pf[i].stallErr != "" {
			stallNA = plain[i].stallErr + pf[i].stallErr
			continue
		}
		stallP, stallQ = append(stallP, plain[i].stall), append(stallQ, pf[i].stall)
	}
	of := func(runs []prefetchRun) []float64 {
		var out []float64
		for _, x := range runs {
			out = append(out, x.tps)
		}
		return out
	}
	r.Add(prefetchSection, name+": plain decode tokens/s", "tok/s", of(plain), "")
	r.Add(prefetchSection, name+": prefetch decode tokens/s", "tok/s", of(pf), "")
	r.Add(prefetchSection, name+": prefetch ÷ plain decode tokens/s", "ratio", tps, "")
	r.Add(prefetchSection, name+": prefetch ÷ plain bytes the disk read", "ratio", read, "the plain runs read nothing")
	r.Add(prefetchSection, name+": I/O stall share, plain (PSI io some ÷ wall)", "share", stallP, stallNA)
	r.Add(prefetchSection, name+": I/O stall share, prefetch (PSI io some ÷ wall)", "share", stallQ, stallNA)
	r.Add(prefetchSection, name+": share of the bytes asked that arrived before use", "share", arrived, "the prefetcher's outcomes were NA")
	r.Add(prefetchSection, name+": the prefetcher's CPU ÷ the run's", "share", own, "no CPU figure")
}

// again runs a run once more when llama.cpp's output lacked its eval-time
// line: its log is written by a thread of its own, and on this 2-vCPU VM
// under load a run exited now and then before that thread had written
// the line (its output cut mid-line), in this section and in sweep's.
func again(cfg Config, run func() (prefetchRun, error)) (prefetchRun, error) {
	r, err := run()
	if err != nil && strings.Contains(err.Error(), sweep.NoReportedTokensPerS) {
		logf(cfg, "%v: once more", err)
		r, err = run()
	}
	return r, err
}

// ioWatch is the model disk's sectors read and the system's PSI io stall
// at one moment.
type ioWatch struct {
	at      time.Time
	sectors uint64
	some    uint64 // µs
	someErr error
}

func watchIO(disk string) (ioWatch, error) {
	w := ioWatch{at: time.Now()}
	st, err := blockdev.DiskStats(disk)
	if err != nil || len(st) != 1 {
		return w, fmt.Errorf("diskstats of %s: %v", disk, err)
	}
	w.sectors = st[0].SectorsRead
	w.some, w.someErr = psiIOSome()
	return w, nil
}

// psiIOSome is /proc/pressure/io's "some" total: µs in which at least one
// task of the machine waited on I/O. System-wide (a memory cgroup of v1
// has no pressure files), so the bench wants a quiet machine.
func psiIOSome() (uint64, error) {
	b, err := os.ReadFile("/proc/pressure/io")
	if err != nil {
		return 0, fmt.Errorf("no PSI on this kernel: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "some "); ok {
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "total="); ok {
					return strconv.ParseUint(v, 10, 64)
				}
			}
		}
	}
	return 0, fmt.Errorf("/proc/pressure/io has no some total")
}

// since fills run's read bytes and stall share from before to now.
func (w ioWatch) since(disk string, run *prefetchRun) error {
	now, err := watchIO(disk)
	if err != nil {
		return err
	}
	run.read = float64(now.sectors-w.sectors) * 512
	if w.someErr != nil || now.someErr != nil {
		run.stallErr = fmt.Sprint(w.someErr, now.someErr)
		return nil
	}
	run.stall = float64(now.some-w.some) / float64(now.at.Sub(w.at).Microseconds())
	return nil
}

func modelDisk(model string) (string, error) {
	id, err := blockdev.StatFile(model)
	if err != nil {
		return "", err
	}
	bd, err := blockdev.Of(id)
	if err != nil {
		return "", err
	}
	return blockdev.DiskName(bd), nil
}

// plainPrefetchRun is the command untraced under the budget, cold.
func plainPrefetchRun(cfg Config, argv []string, model, budget string) (prefetchRun, error) {
	var run prefetchRun
	disk, err := modelDisk(model)
	if err != nil {
		return run, err
	}
	c := cfg
	c.MemLimit = size(budget)
	w, err := watchIO(disk)
	if err != nil {
		return run, err
	}
	s, out, errOut, err := runHeld(c, argv, model, true)
	if err != nil {
		return run, err
	}
	if err := w.since(disk, &run); err != nil {
		return run, err
	}
	all := append(out, errOut...)
	tps, ok := sweep.ReportedTokensPerS(all)
	if !ok {
		return run, fmt.Errorf("plain run: %s; its output ended %q", sweep.NoReportedTokensPerS, lastLine(all))
	}
	run.tps, run.cpu = tps, s.cpu
	return run, nil
}

// prefetchedRun is `iocorr prefetch --cold --mem-limit budget` of the
// command, its report written to report.
func prefetchedRun(cfg Config, argv []string, model, budget, report string) (prefetchRun, error) {
	var run prefetchRun
	disk, err := modelDisk(model)
	if err != nil {
		return run, err
	}
	if err := os.MkdirAll(filepath.Dir(report), 0o755); err != nil {
		return run, err
	}
	args := append([]string{"prefetch", "--cold", "--mem-limit", budget, "--report", report, "--"}, argv...)
	logf(cfg, "iocorr %s", strings.Join(args, " "))
	w, err := watchIO(disk)
	if err != nil {
		return run, err
	}
	cmd := exec.Command(cfg.Iocorr, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return run, fmt.Errorf("iocorr prefetch: %w: %s", err, lastLine(out.Bytes()))
	}
	if err := w.since(disk, &run); err != nil {
		return run, err
	}
	tps, ok := sweep.ReportedTokensPerS(out.Bytes())
	if !ok {
		return run, fmt.Errorf("prefetched run: %s; its output ended %q", sweep.NoReportedTokensPerS, lastLine(out.Bytes()))
	}
	run.tps = tps
	// iocorr, the command and the helper: wait4 counts the children
	// iocorr reaped.
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.cpu = float64(syscall.TimevalToNsec(ru.Utime)+syscall.TimevalToNsec(ru.Stime)) / 1e9
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return run, err
	}
	var rep rundir.Prefetched
	if err := json.Unmarshal(b, &rep); err != nil {
		return run, fmt.Errorf("%s: %w", report, err)
	}
	if rep.OutcomeNA == "" && rep.AskedBytes > 0 {
		a := float64(rep.ArrivedBytes) / float64(rep.AskedBytes)
		run.arrived = &a
	}
	own := float64(rep.HelperCPUNS+rep.SelfCPUNS) / 1e9
	run.ownCPU = &own
	return run, nil
}
