package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

func init() {
	register(&command{
		name:    "stats",
		summary: "per-token I/O distributions, read amplification, page-cache residency, routing and expert-cache simulations of a run",
		usage:   "[-i DIR] [--format table|json] [--cache K|SIZE,...]",
		flags:   statsFlags,
		man:     statsManual,
	})
}

func statsFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	dir := fs.StringP("input", "i", rundir.Default, "run directory")
	format := fs.String("format", "table", "output format: table (for people; per token × tensor tables left out) or json (every table)")
	cache := fs.StringSlice("cache", nil, "expert-cache sizes to simulate: K experts per layer (e.g. 2,4) or a byte budget shared by all layers (e.g. 2GiB); default K = 1…n_expert")
	top := fs.Int("top", 10, "tensors per top list")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("stats: takes no arguments, got %q", args)
		}
		if *format != "table" && *format != "json" {
			return usagef("stats: unknown format %q (want table or json)", *format)
		}
		opt, err := parseCache(*cache)
		if err != nil {
			return usagef("stats: --cache: %v", err)
		}
		opt.Top = *top
		run, err := openRun(*dir, "")
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		defer run.Close()
		// The table format never prints the token × tensor residency.
		opt.NoTokenResidency = *format != "json"
		if opt.Snapshots, err = run.Snapshots(); err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		rep, err := stats.Compute(run, opt)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		defer rep.Close()
		if *format == "json" {
			return output.StatsJSON(stdout, rep)
		}
		// The reasons of the NA cells once on stderr, as the other
		// commands' notes: stdout has only the tables.
		notes, err := output.StatsTables(stdout, rep)
		for _, n := range notes {
			fmt.Fprintf(stderr, "iocorr: note: %s\n", n)
		}
		return err
	}
}

// parseCache splits --cache into per-layer sizes (plain numbers) and byte
// budgets (sizes with a unit).
func parseCache(items []string) (stats.Options, error) {
	var o stats.Options
	for _, s := range items {
		if k, err := strconv.Atoi(s); err == nil {
			if k < 1 {
				return o, fmt.Errorf("%q: K must be at least 1", s)
			}
			o.K = append(o.K, k)
			continue
		}
		b, err := units.ParseSize(s)
		if err != nil {
			return o, fmt.Errorf("%q is neither a number of experts nor a size: %v", s, err)
		}
		o.Budgets = append(o.Budgets, b)
	}
	if o.K == nil && o.Budgets != nil {
		o.K = []int{} // budgets only: no per-layer sweep
	}
	return o, nil
}
