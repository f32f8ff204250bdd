package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/predict"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "plan",
		summary: "choose the model's file ranges to pin under a budget (whole tensors, expert slices), or say to pin nothing; and whether a prefetcher or another read-ahead of the disk pays there",
		usage:   "[-i DIR] --mem-limit B [--readahead W] -o plan.json",
		flags:   planFlags,
		man:     planManual,
	})
}

func planFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	dir := fs.StringP("input", "i", rundir.Default, "run directory (recorded under --mem-limit)")
	var budget int64
	memLimitFlag(fs, &budget, "the budget the plan is for (e.g. 160MiB)")
	out := fs.StringP("output", "o", "plan.json", "plan file to write")
	ra := fs.String("readahead", "", readaheadHelp)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("plan: takes no arguments, got %q", args)
		}
		if budget == 0 {
			return usagef("plan: --mem-limit wants the budget (e.g. --mem-limit 160MiB)")
		}
		readahead, err := parseReadahead("plan", *ra)
		if err != nil {
			return err
		}
		run, err := openRun(*dir, "")
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		defer run.Close()
		p, err := predict.MakePlan(run, budget, readahead)
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		if err := p.Write(*out); err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		fmt.Fprintf(stdout, "%s: %s\n%s\n", *out, p.Recommendation, p.Reason)
		if a := p.Prefetch; a.Command != "" {
			fmt.Fprintf(stdout, "prefetch: %s\n%s\n", a.Command, a.Reason)
		} else {
			fmt.Fprintf(stdout, "%s\n", a.Reason)
		}
		if a := p.Readahead; a.Command != "" {
			fmt.Fprintf(stdout, "read-ahead: %s\n%s\n", a.Command, a.Reason)
			if pf := a.Prefetch; pf.Command != "" {
				fmt.Fprintf(stdout, "at read_ahead_kb %d, prefetch: %s\n%s\n", a.KB, pf.Command, pf.Reason)
			} else {
				fmt.Fprintf(stdout, "at read_ahead_kb %d, %s\n", a.KB, pf.Reason)
			}
		} else {
			fmt.Fprintf(stdout, "%s\n", a.Reason)
		}
		return nil
	}
}
