package main

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/sweep"
)

// exportStats writes every table of iocorr stats for the run in dir: as
// Parquet, one file per table in the directory out (<table>.parquet), so
// that DuckDB, pandas or Spark read each with its own schema; in a text
// format, the one table named table. A column NA in every row is left
// out unless all, said once on stderr and in each file's sidecar.
func exportStats(dir, out, table string, format output.Format, all bool) error {
	run, err := openRun(dir, "")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer run.Close()
	if format != output.Parquet && table == "" {
		return usagef("export: stats in %s is one table: give --table NAME (parquet writes every table)", format)
	}
	// Every table, the token × tensor residency too, unless one other
	// table is asked for.
	opt := stats.Options{NoTokenResidency: table != "" && table != "residency"}
	if opt.Snapshots, err = run.Snapshots(); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	rep, err := stats.Compute(run, opt)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer rep.Close()
	// Every column NA, as table.column, for the one note of each reason
	// on stderr.
	every := &output.Unmeasured{Counters: output.CounterNA{}, All: all}
	some := map[string][]string{}
	write := func(path string, t *stats.Table) error {
		var na output.TableNA
		if err := writeExport(path, func(w io.Writer) (err error) {
			na, err = output.StatsTable(w, format, rep.Status, t, all)
			return err
		}); err != nil {
			return err
		}
		for col, why := range na.Every {
			every.Counters[t.Name+"."+col] = why
		}
		for col, why := range na.Some {
			some[why] = append(some[why], t.Name+"."+col)
		}
		for _, col := range na.PerRow {
			why := "a reason per row in " + t.Name + "." + col + "_na_reason"
			some[why] = append(some[why], t.Name+"."+col)
		}
		return writeSidecar(path, na.Sidecar(dir, rep.Status))
	}
	note := func() {
		noteUnmeasured(every)
		for _, why := range slices.Sorted(maps.Keys(some)) {
			slices.Sort(some[why])
			fmt.Fprintf(stderr, "iocorr: note: %s NA in some rows: %s\n", strings.Join(some[why], ", "), why)
		}
	}
	if format != output.Parquet {
		t := rep.Table(table)
		if t == nil {
			return usagef("export: stats has no table %q", table)
		}
		if err := write(out, t); err != nil {
			return err
		}
		note()
		return nil
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for i := range rep.Tables {
		t := &rep.Tables[i]
		if table != "" && t.Name != table {
			continue
		}
		if err := write(filepath.Join(out, t.Name+".parquet"), t); err != nil {
			return err
		}
	}
	note()
	return nil
}

// exportSweep writes the summary rows of the sweep in dir, every column
// kept; what is NA and why goes to the sidecar and, once, to stderr.
func exportSweep(dir, out string, format output.Format, rows []sweep.Row) error {
	var na output.TableNA
	if err := writeExport(out, func(w io.Writer) (err error) {
		na, err = output.SweepExport(w, format, rows)
		return err
	}); err != nil {
		return err
	}
	for _, n := range na.Notes("") {
		fmt.Fprintf(stderr, "iocorr: note: NA: %s\n", n)
	}
	return writeSidecar(out, na.Sidecar(dir, ""))
}
