package main

import (
	"fmt"
	"os"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/stats"
)

// writePairReport is `iocorr report A B`: the two runs side by side.
func writePairReport(o reportOptions, dirA, dirB string) error {
	var runs [2]report.PairRun
	for i, dir := range []string{dirA, dirB} {
		run, err := openRunOf("AB"[i:i+1], dir)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		defer run.Close()
		sr, err := stats.Compute(run, stats.Options{NoTokenResidency: true})
		if err != nil {
			return fmt.Errorf("report: %s: %w", dir, err)
		}
		runs[i] = report.PairRun{Run: run, Stats: sr}
	}
	p, err := report.BuildPair(runs[0], runs[1])
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := atomicfile.Write(o.out, 0o644, false, p.WriteHTML); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	fi, _ := os.Stat(o.out)
	fmt.Fprintf(stdout, "%s: runs %s and %s, %d comparison charts, %d side by side, %d tables, %s\n",
		o.out, dirA, dirB, len(p.Charts), len(p.Sides), len(p.Tables), units.Bytes(float64(fi.Size())))
	return writePNGs(stdout, o.png, p.WritePNGs)
}
