package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

func init() {
	register(&command{
		name:    "stats",
		summary: "per-token I/O distributions, read amplification, page-cache residency, routing and expert-cache simulations of a run",
		usage:   "[-i DIR] [--format table|json] [--cache K|SIZE,...]",
		flags:   statsFlags,
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
		st, meta, err := openRunMeta(*dir)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		defer st.Close()
		// The table format never prints the token × tensor residency.
		opt.NoTokenResidency = *format != "json"
		rep, err := stats.Compute(st, meta, opt)
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		if *format == "json" {
			return writeStatsJSON(stdout, rep)
		}
		return writeStatsTables(stdout, rep)
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
		b, err := parseSize(s)
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

// statsCell renders a value for a table by its column's unit suffix.
func statsCell(c stats.Column, v stats.Value) cell {
	switch {
	case v.NA != "":
		return naCell()
	case c.Kind == stats.String:
		return txt(v.S)
	case c.Kind == stats.Int && v.I >= 0 && strings.HasSuffix(c.Name, "_bytes"):
		return bytesCell(uint64(v.I))
	case c.Kind == stats.Int && v.I >= 0 && strings.HasSuffix(c.Name, "_ns"):
		return durCell(uint64(v.I))
	case c.Kind == stats.Int:
		return num(v.I)
	case strings.HasSuffix(c.Name, "_bytes") && v.F >= 0:
		return txtAs("", humanBytes(uint64(v.F+0.5)))
	case strings.HasSuffix(c.Name, "_ns") && v.F >= 0:
		return txtAs("", humanDuration(uint64(v.F+0.5)))
	}
	return txt(strconv.FormatFloat(v.F, 'g', 4, 64))
}

// writeStatsTables prints each table a person reads; tables with many
// columns and few rows (per phase) are printed one figure per line.
func writeStatsTables(w io.Writer, rep *stats.Report) error {
	for ti := range rep.Tables {
		t := &rep.Tables[ti]
		if t.Long {
			continue
		}
		fmt.Fprintf(w, "\n## %s — %s\n", t.Name, t.Title)
		var reasons []string
		note := func(v stats.Value) {
			if v.NA != "" && !slices.Contains(reasons, v.NA) {
				reasons = append(reasons, v.NA)
			}
		}
		if len(t.Columns) > 8 && len(t.Rows) <= 4 && len(t.Rows) > 0 {
			cols := []column{{Name: "figure"}}
			for _, r := range t.Rows {
				cols = append(cols, column{Name: r[0].S})
			}
			rw := newResultWriter(w, formatTable, cols)
			for ci := 1; ci < len(t.Columns); ci++ {
				cells := []cell{txt(t.Columns[ci].Name)}
				for _, r := range t.Rows {
					cells = append(cells, statsCell(t.Columns[ci], r[ci]))
					note(r[ci])
				}
				if err := rw.Row(cells...); err != nil {
					return err
				}
			}
			if err := rw.Close(); err != nil {
				return err
			}
		} else {
			cols := make([]column, len(t.Columns))
			for i, c := range t.Columns {
				cols[i] = column{Name: c.Name}
			}
			rw := newResultWriter(w, formatTable, cols)
			for _, r := range t.Rows {
				cells := make([]cell, len(r))
				for i := range r {
					cells[i] = statsCell(t.Columns[i], r[i])
					note(r[i])
				}
				if err := rw.Row(cells...); err != nil {
					return err
				}
			}
			if err := rw.Close(); err != nil {
				return err
			}
		}
		for _, r := range reasons {
			fmt.Fprintf(w, "NA: %s\n", r)
		}
	}
	return nil
}

// writeStatsJSON writes {"run_status": …, "tables": {NAME: [ROW…]}}; an
// unmeasured figure is null with a NAME_na_reason key beside it.
func writeStatsJSON(w io.Writer, rep *stats.Report) error {
	tables := map[string][]map[string]any{}
	var names []string
	for _, t := range rep.Tables {
		rows := make([]map[string]any, 0, len(t.Rows))
		for _, r := range t.Rows {
			m := map[string]any{}
			for i, c := range t.Columns {
				v := r[i]
				switch {
				case v.NA != "":
					m[c.Name] = nil
					m[c.Name+"_na_reason"] = v.NA
				case c.Kind == stats.String:
					m[c.Name] = v.S
				case c.Kind == stats.Int:
					m[c.Name] = v.I
				default:
					m[c.Name] = v.F
				}
			}
			rows = append(rows, m)
		}
		tables[t.Name] = rows
		names = append(names, t.Name)
	}
	out := map[string]any{"tables": tables, "table_order": names}
	if rep.Status != "" {
		out["run_status"] = rep.Status
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(out)
}
