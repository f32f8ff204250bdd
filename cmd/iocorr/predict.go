package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/predict"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "predict",
		summary: "predict bytes read, major faults, stall and tokens/s per token at other memory budgets from one run (kernel, plan, Belady)",
		usage:   "[-i DIR] --mem-limit 96MiB,192MiB,... [--plan FILE] [--prefetch experts|layers|both [--release]] [--format table|csv|json|jsonl]",
		flags:   predictFlags,
		man:     predictManual,
	})
}

func predictFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	dir := fs.StringP("input", "i", rundir.Default, "run directory (recorded under --mem-limit, default tier or above)")
	limits := memLimitsFlag(fs, "memory budgets to predict (e.g. 96MiB,192MiB)")
	planFile := fs.String("plan", "", "a pin plan (iocorr plan -o): also predict with its ranges pinned")
	ra := fs.String("readahead", "", readaheadHelp)
	prefetch := fs.String("prefetch", "", "also predict a prefetcher's requests: experts (the picked experts' slices at the router's pick), layers (the next layer's dense weights at a layer's start) or both (the next layer's at the pick, after the picked slices)")
	release := fs.Bool("release", false, "with --prefetch: the prefetcher releases the pages it brought in once their layer used them (iocorr prefetch --release)")
	format := output.Table
	fs.Var(&format, "format", "output format: table, csv, json or jsonl")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("predict: takes no arguments, got %q", args)
		}
		if *release && *prefetch == "" {
			return usagef("predict: --release is the prefetcher's: it wants --prefetch")
		}
		if len(limits.Bytes) == 0 {
			return usagef("predict: --mem-limit wants the budgets (e.g. --mem-limit 96MiB,192MiB)")
		}
		opt := predict.Options{Budgets: limits.Bytes, Release: *release}
		if *prefetch != "" {
			pol := predict.PrefetchPolicy(*prefetch)
			if pol == "" {
				return usagef("predict: --prefetch %q: want experts, layers or both", *prefetch)
			}
			opt.Prefetch = []string{pol}
		}
		var err error
		if opt.Readahead, err = parseReadahead("predict", *ra); err != nil {
			return err
		}
		run, err := openRun(*dir, "")
		if err != nil {
			return fmt.Errorf("predict: %w", err)
		}
		defer run.Close()
		if *planFile != "" {
			if opt.Pinned, err = planRanges(*planFile, run.Meta); err != nil {
				return fmt.Errorf("predict: %w", err)
			}
		}
		snaps, err := run.Snapshots()
		if err != nil {
			return fmt.Errorf("predict: %w", err)
		}
		res, err := predict.Compute(run, snaps, opt)
		if err != nil {
			return fmt.Errorf("predict: %w", err)
		}
		return writePrediction(res, format, run.Meta.Status())
	}
}

// writePrediction writes a prediction's rows; why a figure is NA goes
// once to stderr (a reason column only where the rows' reasons differ).
func writePrediction(res *predict.Result, format output.Format, status string) error {
	na, err := output.Prediction(stdout, res, format, status)
	if res.ModesNote != "" {
		fmt.Fprintf(stderr, "iocorr: note: %s\n", res.ModesNote)
	}
	for _, n := range na.Notes("") {
		fmt.Fprintf(stderr, "iocorr: note: NA: %s\n", n)
	}
	return err
}

// planRanges reads a plan and checks it is for the run's model.
func planRanges(path string, meta *rundir.Meta) ([][2]int64, error) {
	p, err := pin.Read(path)
	if err != nil {
		return nil, err
	}
	if len(meta.Models) != 1 {
		return nil, fmt.Errorf("a plan is for one model file; the run mapped %d", len(meta.Models))
	}
	if why := p.Matches(predict.ModelIdentity(&meta.Models[0])); why != "" {
		return nil, fmt.Errorf("plan %s: %s", path, why)
	}
	return p.Spans(), nil
}

const readaheadHelp = "the fault read-around window: a size, or calibrate (the one that reproduces the run's own bytes at its budget) (default: the kernel's, the model disk's read_ahead_kb doubled, as llama.cpp's loader asks with POSIX_FADV_SEQUENTIAL)"

// parseReadahead reads --readahead for predict and plan: "" for the
// kernel's window, a size, or calibrate.
func parseReadahead(cmd, s string) (int64, error) {
	switch s {
	case "":
		return 0, nil
	case "calibrate":
		return predict.ReadaheadCalibrate, nil
	}
	n, err := units.ParseSize(s)
	if err != nil || n <= 0 {
		return 0, usagef("%s: --readahead %q: want a positive size or calibrate", cmd, s)
	}
	return n, nil
}
