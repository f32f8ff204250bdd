package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/sweep"
)

func init() {
	register(&command{
		name:    "report",
		summary: "one self-contained HTML file of a run (or a sweep): header, stats tables, heatmaps and charts",
		usage:   "[-i DIR] [-o report.html] [--png DIR]",
		flags:   reportFlags,
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
		if len(args) > 0 {
			return usagef("report: takes no arguments, got %q", args)
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
		row, err := sweepRun(sum)
		if err != nil {
			return fmt.Errorf("report: %s: %w", o.dir, err)
		}
		opt.Sweep, opt.SweepDir = sum, o.dir
		runDir = filepath.Join(o.dir, row.RunDir)
		opt.RunDir = runDir
	}
	st, meta, err := openRunMeta(runDir)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	defer st.Close()
	sr, err := stats.Compute(st, meta, stats.Options{NoTokenResidency: true})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	rep, err := report.Build(st, meta, sr, opt)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	tmp := o.out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	bw := bufio.NewWriter(f)
	err = rep.WriteHTML(bw)
	err = cmp.Or(err, bw.Flush(), f.Close())
	if err == nil {
		err = os.Rename(tmp, o.out)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("report: writing %s: %w", o.out, err)
	}
	fi, _ := os.Stat(o.out)
	fmt.Fprintf(stdout, "%s: %d charts, %d tables, %s\n", o.out, len(rep.Charts), len(rep.Tables), humanBytes(uint64(fi.Size())))
	if o.png != "" {
		paths, err := rep.WritePNGs(o.png)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		for _, p := range paths {
			fmt.Fprintln(stdout, p)
		}
	}
	return nil
}

// sweepRun picks the sweep's run the report shows: the smallest budget
// whose run ended in order.
func sweepRun(s *sweep.Summary) (sweep.Row, error) {
	var best *sweep.Row
	for i := range s.Rows {
		r := &s.Rows[i]
		if r.Status == sweep.StatusOK && (best == nil || r.MemLimit < best.MemLimit) {
			best = r
		}
	}
	if best == nil {
		return sweep.Row{}, errors.New("no run of the sweep ended in order: nothing to report")
	}
	return *best, nil
}
