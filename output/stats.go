package output

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/stats"
)

// StatsTables prints each table of rep a person reads; tables with many
// columns and few rows (per phase) are printed one figure per line. The
// reasons of the NA cells follow each table.
func StatsTables(w io.Writer, rep *stats.Report) error {
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
			cols := []Column{{Name: "figure"}}
			for _, r := range t.Rows {
				cols = append(cols, Column{Name: r[0].S})
			}
			rw := New(w, Table, cols)
			for ci := 1; ci < len(t.Columns); ci++ {
				cells := []Cell{Text(t.Columns[ci].Name)}
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
			cols := make([]Column, len(t.Columns))
			for i, c := range t.Columns {
				cols[i] = Column{Name: c.Name}
			}
			rw := New(w, Table, cols)
			for _, r := range t.Rows {
				cells := make([]Cell, len(r))
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

// statsCell renders a value for a table by its column's unit suffix.
func statsCell(c stats.Column, v stats.Value) Cell {
	switch {
	case v.NA != "":
		return NA()
	case c.Kind == stats.String:
		return Text(v.S)
	case c.Kind == stats.Int && v.I >= 0 && strings.HasSuffix(c.Name, "_bytes"):
		return Bytes(uint64(v.I))
	case c.Kind == stats.Int && v.I >= 0 && strings.HasSuffix(c.Name, "_ns"):
		return Duration(uint64(v.I))
	case c.Kind == stats.Int:
		return Num(v.I)
	case strings.HasSuffix(c.Name, "_bytes") && v.F >= 0:
		return TextAs("", units.Bytes(float64(uint64(v.F+0.5))))
	case strings.HasSuffix(c.Name, "_ns") && v.F >= 0:
		return TextAs("", units.Duration(float64(uint64(v.F+0.5))))
	}
	return Text(strconv.FormatFloat(v.F, 'g', 4, 64))
}

// StatsJSON writes {"run_status": …, "tables": {NAME: [ROW…]},
// "table_order": [NAME…]}; an unmeasured figure is null with a
// NAME_na_reason key beside it.
func StatsJSON(w io.Writer, rep *stats.Report) error {
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

// StatsTable writes one table of stats in format, for programs: a column
// that is NA in some row gets a <name>_na_reason column beside it, as in
// StatsJSON, so that no reason is lost.
func StatsTable(w io.Writer, format Format, status string, t *stats.Table) error {
	cols, reasons := statsColumns(t)
	rw := New(w, format, cols)
	rw.SetStatus(status)
	cells := make([]Cell, 0, len(cols))
	for _, r := range t.Rows {
		cells = cells[:0]
		for i, c := range t.Columns {
			v := r[i]
			switch {
			case v.NA != "":
				cells = append(cells, NA())
			case c.Kind == stats.String:
				cells = append(cells, Text(v.S))
			case c.Kind == stats.Float:
				cells = append(cells, Float(v.F))
			default:
				cells = append(cells, Num(v.I))
			}
			if reasons[i] {
				if v.NA != "" {
					cells = append(cells, Text(v.NA))
				} else {
					cells = append(cells, NA())
				}
			}
		}
		if err := rw.Row(cells...); err != nil {
			return err
		}
	}
	return rw.Close()
}

// statsColumns types a stats table's columns and says which are NA in
// some row (and so have a reason column).
func statsColumns(t *stats.Table) (cols []Column, reasons []bool) {
	reasons = make([]bool, len(t.Columns))
	for _, r := range t.Rows {
		for i := range r {
			reasons[i] = reasons[i] || r[i].NA != ""
		}
	}
	for i, c := range t.Columns {
		typ := Int64
		switch c.Kind {
		case stats.String:
			typ = String
		case stats.Float:
			typ = Float64
		}
		cols = append(cols, Column{Name: c.Name, Type: typ, Nullable: reasons[i]})
		if reasons[i] {
			cols = append(cols, Column{Name: c.Name + "_na_reason", Type: String, Nullable: true})
		}
	}
	return cols, reasons
}
