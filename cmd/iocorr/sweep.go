//go:build linux && !noloader

package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/dataset"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/recorder/sweeprun"
	"github.com/iocorr/iocorr/sweep"
)

func init() {
	register(&command{
		name:    "sweep",
		summary: "record a command once per memory budget and sum each run up against its budget",
		usage:   "--mem-limit 64MiB,96MiB,... [-o DIR] [--dataset DIR] [--cold] [record flags] [--format table|csv|json|jsonl|parquet] -- CMD [ARGS...]",
		flags:   sweepFlags,
		man:     sweepManual,
	})
}

func sweepFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := &recordOpts{}
	limits := memLimitsFlag(fs, "memory budgets (e.g. 64MiB,96MiB,128MiB), one run each in DIR/<budget>/")
	dir := fs.StringP("output", "o", "iocorr.sweep", "sweep directory to write")
	ds := fs.String("dataset", "", "study dataset (hive-partitioned Parquet, as export dataset writes) to add each run to, failed ones as a runs row; give several sweeps one to make one study (default DIR/dataset)")
	fs.BoolVarP(&o.rec.Force, "force", "f", false, "overwrite existing run directories of the sweep")
	runFlags(fs, o, "before each run")
	format := fileFormatFlag(fs, output.Table)
	return func(ctx context.Context, argv []string) error {
		if len(limits.Bytes) == 0 {
			return usagef("sweep: --mem-limit wants the budgets (e.g. --mem-limit 64MiB,96MiB,128MiB)")
		}
		var budgets []sweeprun.Budget
		for i, n := range limits.Bytes {
			budgets = append(budgets, sweeprun.Budget{Name: limits.Typed[i], Bytes: n})
		}
		stdout, stderr = shareable(stdout), shareable(stderr)
		ro, err := o.options(argv)
		if err != nil {
			return usagef("sweep: %v", err)
		}
		ro.Progress = nil
		// stdout is the summary's: the command's own output goes to
		// stderr, beside the sweep's progress.
		ro.Stdout = stderr
		if *ds == "" {
			*ds = filepath.Join(*dir, "dataset")
		}
		sum, err := sweeprun.Run(ctx, sweeprun.Sweep{Dir: *dir, Budgets: budgets, Record: ro, Stderr: stderr, Dataset: dataset.Sweep{Dir: *ds}})
		if len(sum.Rows) > 0 {
			if werr := writeSweepOutput(*dir, *format, sum.Rows); werr != nil && err == nil {
				err = werr
			}
		}
		if err != nil {
			return commandErr("sweep", err)
		}
		return nil
	}
}

// writeSweepOutput prints the summary in format; Parquet, binary, goes to
// DIR/sweep.parquet instead (sweep.json is always there).
func writeSweepOutput(dir string, format output.Format, rows []sweep.Row) error {
	if format != output.Parquet {
		return output.SweepRows(stdout, format, rows)
	}
	out := filepath.Join(dir, "sweep.parquet")
	if err := writeExport(out, func(w io.Writer) error { return output.SweepRows(w, format, rows) }); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "iocorr: sweep: summary written to %s\n", out)
	return nil
}
