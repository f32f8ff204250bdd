package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/sweep"
)

func init() {
	register(&command{
		name:    "report",
		summary: "one self-contained HTML file of a run (or a sweep, or two runs side by side): header, stats tables, heatmaps and charts",
		usage:   "[-i DIR] [-o report.html] [--png DIR]  |  [-o report.html] [--png DIR] A B",
		flags:   reportFlags,
		man:     reportManual,
	})
}

type reportOptions struct {
	dir, out, png string
}

func reportFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	var o reportOptions
	fs.StringVarP(&o.dir, "input", "i", rundir.Default, "run directory, or a sweep directory (its sweep.json; the report shows its smallest budget that ran)")
	fs.StringVarP(&o.out, "output", "o", "report.html", "HTML file to write")
	fs.StringVar(&o.png, "png", "", "also write each chart as DIR/NAME.png")
	return func(ctx context.Context, args []string) error {
		if len(args) == 2 && !fs.Changed("input") {
			return writePairReport(o, args[0], args[1]) // diff_report.go
		}
		if len(args) > 0 {
			return usagef("report: one run (-i DIR) or two side by side (A B), got -i %s and %q", o.dir, args)
		}
		return writeReport(o)
	}
}

func writeReport(o reportOptions) error {
	opt := report.Options{RunDir: o.dir}
	runDir := o.dir
	if _, err := os.Stat(filepath.Join(o.dir, sweep.SummaryFile)); err == nil {
		sum, err := sweep.ReadSummary(o.dir)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		row, err := sum.ReportRun()
		if err != nil {
			return fmt.Errorf("report: %s: %w", o.dir, err)
		}
		opt.Sweep, opt.SweepDir = sum, o.dir
		runDir = filepath.Join(o.dir, row.RunDir)
		opt.RunDir = runDir
	}
	run, err := openRun(runDir, "")
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer run.Close()
	if opt.Snapshots, err = run.Snapshots(); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	sr, err := stats.Compute(run, stats.Options{NoTokenResidency: true, Snapshots: opt.Snapshots})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	rep, err := report.Build(run, sr, opt)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := atomicfile.Write(o.out, 0o644, false, rep.WriteHTML); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fi, _ := os.Stat(o.out)
	fmt.Fprintf(stdout, "%s: %d charts, %d tables, %s\n", o.out, len(rep.Charts), len(rep.Tables), units.Bytes(float64(fi.Size())))
	return writePNGs(stdout, o.png, rep.WritePNGs)
}

// writePNGs writes the report's charts (write: its WritePNGs) as PNG
// files into dir, where one is given, and names each on stdout.
func writePNGs(stdout io.Writer, dir string, write func(dir string) ([]string, error)) error {
	if dir == "" {
		return nil
	}
	paths, err := write(dir)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	for _, p := range paths {
		fmt.Fprintln(stdout, p)
	}
	return nil
}
