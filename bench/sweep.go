package bench

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"github.com/iocorr/iocorr/sweep"
)

// Issue 18's last target: a sweep publishes tokens/s from runs of its own
// that no probe sees, and those must be what a plain run gives, within
// the untraced noise. Each round runs `iocorr sweep --cold` of one budget
// (the traced run, its ingest, then the untraced run) and, in turn before
// or after it, a plain untraced run of the same command under the same
// limit after the same eviction, launched by the bench itself. Both are
// timed alike, by llama.cpp's own eval-time line (sweep.ReportedTokensPerS):
// llama-bench prints none, so the command is llama-completion.

const sweepSection = "sweep untraced"

// completionArgv is llama-completion generating cfg.Tokens tokens: all of
// them, an end-of-text token sampled or not (a run that sampled it first
// would time no decode at all).
func (c Config) completionArgv(model string) []string {
	return []string{filepath.Join(filepath.Dir(c.LlamaBench), "llama-completion"), "-m", model,
		"-p", "The memory of a machine", "-n", strconv.Itoa(c.Tokens), "-t", strconv.Itoa(c.Threads),
		"-no-cnv", "--ignore-eos", "--temp", "0"}
}

// SweepUntraced adds the sweep's untraced tokens/s against plain runs'.
func SweepUntraced(r *Report, cfg Config, model string) {
	argv := cfg.completionArgv(model)
	if _, err := os.Stat(argv[0]); err != nil {
		r.NA(sweepSection, "sweep untraced tokens/s ÷ plain median", "ratio", "no llama-completion beside llama-bench: "+err.Error())
		return
	}
	budget := fmt.Sprintf("%dMiB", cfg.MemLimit>>20)
	var plain, swept, traced []float64
	for i := 0; i < cfg.Pairs; i++ {
		var p, u, tr float64
		var err error
		for k := range 2 {
			if (i+k)%2 == 0 {
				p, err = again(cfg, func() (float64, error) { return plainRun(cfg, argv, model) })
			} else {
				var s sweptSpeeds
				s, err = again(cfg, func() (sweptSpeeds, error) {
					return sweptRun(cfg, argv, budget, filepath.Join(cfg.WorkDir, fmt.Sprintf("sweep-%d", i)))
				})
				u, tr = s.untraced, s.traced
			}
			if err != nil {
				break
			}
		}
		if err != nil {
			logf(cfg, "sweep round %d: %v", i, err)
			r.NA(sweepSection, "sweep untraced tokens/s ÷ plain median", "ratio", orNA(err))
			return
		}
		logf(cfg, "sweep round %d: plain %.2f tok/s, sweep untraced %.2f, traced %.2f", i, p, u, tr)
		plain, swept, traced = append(plain, p), append(swept, u), append(traced, tr)
	}
	med, lo, hi := summarize(plain)
	r.Add(sweepSection, "plain run tokens/s (llama.cpp's eval time)", "tok/s", plain, "")
	r.Add(sweepSection, "sweep untraced tokens/s", "tok/s", swept, "")
	// The noise of a plain run is the spread of the plain runs about
	// their median; the sweep's untraced runs must fall inside it.
	var spread, ratio []float64
	for i := range plain {
		spread = append(spread, plain[i]/med)
		ratio = append(ratio, swept[i]/med)
	}
	r.Add(sweepSection, "plain run tokens/s ÷ plain median (the noise)", "ratio", spread, "")
	r.Add(sweepSection, "sweep untraced tokens/s ÷ plain median", "ratio", ratio, "")
	r.goalWithin(lo/med, hi/med, "median")
	var vsUntraced []float64
	for i := range swept {
		vsUntraced = append(vsUntraced, traced[i]/swept[i])
	}
	r.Add(sweepSection, "sweep traced ÷ untraced tokens/s (as reported)", "ratio", vsUntraced, "")
}

// plainRun is the command run untraced under the limit, cold, as a user
// runs it by hand: its reported tokens/s.
func plainRun(cfg Config, argv []string, model string) (float64, error) {
	_, out, errOut, err := runHeld(cfg, argv, model, true)
	if err != nil {
		return 0, err
	}
	all := append(out, errOut...)
	tps, ok := sweep.ReportedTokensPerS(all)
	if !ok {
		return 0, errors.New("plain run: " + sweep.NoReport(all))
	}
	return tps, nil
}

// sweptSpeeds is a sweep's tokens/s at its one budget, as llama.cpp
// reported them: its untraced run's and its traced run's.
type sweptSpeeds struct{ untraced, traced float64 }

// sweptRun is `iocorr sweep --cold` of the one budget into dir: its
// untraced and traced runs' reported tokens/s.
func sweptRun(cfg Config, argv []string, budget, dir string) (sweptSpeeds, error) {
	args := append([]string{"sweep", "-f", "-o", dir, "--cold", "--mem-limit", budget, "--"}, argv...)
	if out, err := exec.Command(cfg.Iocorr, args...).CombinedOutput(); err != nil {
		return sweptSpeeds{}, fmt.Errorf("iocorr sweep: %w: %s", err, sweep.LastLine(out))
	}
	sum, err := sweep.ReadSummary(dir)
	if err != nil {
		return sweptSpeeds{}, err
	}
	if len(sum.Rows) != 1 {
		return sweptSpeeds{}, fmt.Errorf("iocorr sweep of one budget wrote %d rows", len(sum.Rows))
	}
	row := &sum.Rows[0]
	if row.UntracedTokensPerS == nil {
		return sweptSpeeds{}, fmt.Errorf("iocorr sweep: no untraced tokens/s: %s", row.NA["untraced_tokens_per_s"])
	}
	if row.ReportedTokensPerS == nil {
		return sweptSpeeds{}, fmt.Errorf("iocorr sweep: no reported tokens/s: %s", row.NA["reported_tokens_per_s"])
	}
	return sweptSpeeds{untraced: *row.UntracedTokensPerS, traced: *row.ReportedTokensPerS}, nil
}
