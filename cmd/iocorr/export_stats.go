package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/stats"
)

// exportStats writes every table of iocorr stats for the run in dir: as
// Parquet, one file per table in the directory out (<table>.parquet), so
// that DuckDB, pandas or Spark read each with its own schema; in a text
// format, the one table named table.
func exportStats(dir, out, table string, format output.Format) error {
	st, meta, err := openRunMeta(dir)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer st.Close()
	if format != output.Parquet && table == "" {
		return usagef("export: stats in %s is one table: give --table NAME (parquet writes every table)", format)
	}
	// Every table, the token × tensor residency too, unless one other
	// table is asked for.
	opt, err := withSnapshots(dir, stats.Options{NoTokenResidency: table != "" && table != "residency"})
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	rep, err := stats.Compute(st, meta, opt)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer rep.Close()
	if format != output.Parquet {
		t := rep.Table(table)
		if t == nil {
			return usagef("export: stats has no table %q", table)
		}
		return writeExport(out, func(w io.Writer) error { return output.StatsTable(w, format, rep.Status, t) })
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for i := range rep.Tables {
		t := &rep.Tables[i]
		if table != "" && t.Name != table {
			continue
		}
		path := filepath.Join(out, t.Name+".parquet")
		if err := writeExport(path, func(w io.Writer) error { return output.StatsTable(w, format, rep.Status, t) }); err != nil {
			return err
		}
	}
	return nil
}
