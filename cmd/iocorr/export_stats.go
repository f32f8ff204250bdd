package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

// exportStats writes every table of iocorr stats for the run in dir: as
// Parquet, one file per table in the directory out (<table>.parquet), so
// that DuckDB, pandas or Spark read each with its own schema; in a text
// format, the one table named table.
func exportStats(dir, out, table string, format outputFormat) error {
	st, meta, err := openRunMeta(dir)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer st.Close()
	rep, err := statsReport(st, meta, format, table)
	if err != nil {
		return err
	}
	if format != formatParquet {
		t := rep.Table(table)
		if t == nil {
			return usagef("export: stats has no table %q", table)
		}
		return writeExport(out, func(w io.Writer) error { return writeStatsTable(w, format, rep.Status, t) })
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
		if err := writeExport(path, func(w io.Writer) error { return writeStatsTable(w, format, rep.Status, t) }); err != nil {
			return err
		}
	}
	return nil
}

func statsReport(st *index.Store, meta *rundir.Meta, format outputFormat, table string) (*stats.Report, error) {
	if format != formatParquet && table == "" {
		return nil, usagef("export: stats in %s is one table: give --table NAME (parquet writes every table)", format)
	}
	// Every table, the token × tensor residency too, unless one other
	// table is asked for.
	rep, err := stats.Compute(st, meta, stats.Options{NoTokenResidency: table != "" && table != "residency"})
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	return rep, nil
}

// statsExportColumns types a stats table's columns; a column that is NA
// in some row gets a <name>_na_reason column beside it, as in iocorr
// stats --format json, so that no reason is lost.
func statsExportColumns(t *stats.Table) (cols []typedColumn, reasons []bool) {
	reasons = make([]bool, len(t.Columns))
	for _, r := range t.Rows {
		for i := range r {
			reasons[i] = reasons[i] || r[i].NA != ""
		}
	}
	for i, c := range t.Columns {
		typ := typInt64
		switch c.Kind {
		case stats.String:
			typ = typString
		case stats.Float:
			typ = typFloat64
		}
		cols = append(cols, typedColumn{Name: c.Name, Type: typ, Nullable: reasons[i]})
		if reasons[i] {
			cols = append(cols, typedColumn{Name: c.Name + "_na_reason", Type: typString, Nullable: true})
		}
	}
	return cols, reasons
}

func writeStatsTable(w io.Writer, format outputFormat, status string, t *stats.Table) error {
	cols, reasons := statsExportColumns(t)
	rw := newRowWriter(w, format, cols)
	rw.SetStatus(status)
	cells := make([]cell, 0, len(cols))
	for _, r := range t.Rows {
		cells = cells[:0]
		for i, c := range t.Columns {
			v := r[i]
			switch {
			case v.NA != "":
				cells = append(cells, naCell())
			case c.Kind == stats.String:
				cells = append(cells, txt(v.S))
			case c.Kind == stats.Float:
				cells = append(cells, floatCell(v.F))
			default:
				cells = append(cells, num(v.I))
			}
			if reasons[i] {
				if v.NA != "" {
					cells = append(cells, txt(v.NA))
				} else {
					cells = append(cells, naCell())
				}
			}
		}
		if err := rw.Row(cells...); err != nil {
			return err
		}
	}
	return rw.Close()
}
