package output

import (
	"bufio"
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
// columns and few rows (per phase) are printed one figure per line. A
// figure not measured is an NA cell; why is in notes, once per reason for
// every table (which the caller puts on stderr, as the other commands'):
// "TABLE.COLUMN, … NA: reason", in the order the tables first meet it.
func StatsTables(w io.Writer, rep *stats.Report) (notes []string, err error) {
	var reasons []string
	cols := map[string][]string{} // reason → table.column
	for ti := range rep.Tables {
		t := &rep.Tables[ti]
		if t.Long {
			continue
		}
		fmt.Fprintf(w, "\n## %s — %s\n", t.Name, t.Title)
		note := func(c stats.Column, v stats.Value) {
			if v.NA == "" {
				return
			}
			if _, seen := cols[v.NA]; !seen {
				reasons = append(reasons, v.NA)
			}
			if col := t.Name + "." + c.Name; !slices.Contains(cols[v.NA], col) {
				cols[v.NA] = append(cols[v.NA], col)
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
					note(t.Columns[ci], r[ci])
				}
				if err := rw.Row(cells...); err != nil {
					return nil, err
				}
			}
			if err := rw.Close(); err != nil {
				return nil, err
			}
		} else {
			cols := make([]Column, len(t.Columns))
			for i, c := range t.Columns {
				cols[i] = Column{Name: c.Name}
			}
			rw := New(w, Table, cols)
			if err := t.Each(func(r []stats.Value) error {
				cells := make([]Cell, len(r))
				for i := range r {
					cells[i] = statsCell(t.Columns[i], r[i])
					note(t.Columns[i], r[i])
				}
				return rw.Row(cells...)
			}); err != nil {
				return nil, err
			}
			if err := rw.Close(); err != nil {
				return nil, err
			}
		}
	}
	for _, why := range reasons {
		notes = append(notes, fmt.Sprintf("%s NA: %s", strings.Join(cols[why], ", "), why))
	}
	return notes, nil
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

// StatsJSON writes {"run_status": …, "table_order": [NAME…], "tables":
// {NAME: [ROW…]}}; an unmeasured figure is null with a NAME_na_reason key
// beside it. Rows are written as they are read, one to a line: the
// residency table has a row per token × tensor.
func StatsJSON(w io.Writer, rep *stats.Report) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	var names []string
	for _, t := range rep.Tables {
		names = append(names, t.Name)
	}
	head := map[string]any{"table_order": names}
	if rep.Status != "" {
		head["run_status"] = rep.Status
	}
	hb, err := json.Marshal(head)
	if err != nil {
		return err
	}
	// The head's closing brace gives way to the tables.
	bw.Write(hb[:len(hb)-1])
	bw.WriteString(",\n\"tables\": {")
	m := map[string]any{}
	for ti := range rep.Tables {
		t := &rep.Tables[ti]
		name, _ := json.Marshal(t.Name)
		if ti > 0 {
			bw.WriteString(",")
		}
		fmt.Fprintf(bw, "\n%s: [", name)
		n := 0
		err := t.Each(func(r []stats.Value) error {
			clear(m)
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
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			if n > 0 {
				bw.WriteString(",")
			}
			n++
			bw.WriteString("\n ")
			_, err = bw.Write(b)
			return err
		})
		if err != nil {
			return fmt.Errorf("table %s: %w", t.Name, err)
		}
		bw.WriteString("]")
	}
	bw.WriteString("\n}}\n")
	return bw.Flush()
}

// StatsTable writes one table of stats in format, for programs: a column
// that is NA in some rows gets a <name>_na_reason column beside it, as in
// StatsJSON, so that no reason is lost. A column NA in every row for one
// reason (a figure the run's tier did not measure) is left out, unless
// all; left maps each column left out to its reason.
func StatsTable(w io.Writer, format Format, status string, t *stats.Table, all bool) (left map[string]string, err error) {
	cols, reasons, left, err := statsColumns(t, all)
	if err != nil {
		return nil, err
	}
	rw := New(w, format, cols)
	rw.SetStatus(status)
	cells := make([]Cell, 0, len(cols))
	err = t.Each(func(r []stats.Value) error {
		cells = cells[:0]
		for i, c := range t.Columns {
			v := r[i]
			if _, out := left[c.Name]; out {
				continue
			}
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
		return rw.Row(cells...)
	})
	if err != nil {
		return nil, err
	}
	return left, rw.Close()
}

// statsColumns types a stats table's columns and says which are NA in
// some row (and so have a reason column) and, unless all, which are NA
// in every row for one reason (left out, with it).
func statsColumns(t *stats.Table, all bool) (cols []Column, reasons []bool, left map[string]string, err error) {
	reasons = make([]bool, len(t.Columns))
	// only is a column's one reason while every row so far is NA for it.
	only := make([]string, len(t.Columns))
	rows := 0
	if err := t.Each(func(r []stats.Value) error {
		for i := range r {
			reasons[i] = reasons[i] || r[i].NA != ""
			if rows == 0 || only[i] == r[i].NA {
				only[i] = r[i].NA
			} else {
				only[i] = ""
			}
		}
		rows++
		return nil
	}); err != nil {
		return nil, nil, nil, err
	}
	left = map[string]string{}
	for i, c := range t.Columns {
		if !all && rows > 0 && only[i] != "" {
			left[c.Name] = only[i]
			continue
		}
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
	return cols, reasons, left, nil
}

// statsLongColumns are StatsLong's: every figure of every table in one
// schema, so that the tables of many runs, whose NA columns differ, read
// as one.
var statsLongColumns = []Column{{"table", String, false}, {"row", Uint32, false}, {"figure", String, false},
	{"int", Int64, true}, {"float", Float64, true}, {"text", String, true}, {"na_reason", String, true}}

// StatsLong writes every table of rep as one long table: a row per
// table, row and figure, its value in the column of its kind (int, float
// or text) and, when NA, null there with na_reason saying why. Tables
// whose rows come as they are read (Long) are left out.
func StatsLong(w io.Writer, format Format, rep *stats.Report) error {
	rw := New(w, format, statsLongColumns)
	rw.SetStatus(rep.Status)
	for ti := range rep.Tables {
		t := &rep.Tables[ti]
		if t.Long {
			continue
		}
		n := 0
		if err := t.Each(func(r []stats.Value) error {
			n++
			for i, c := range t.Columns {
				v := r[i]
				cells := []Cell{Text(t.Name), Num(n), Text(c.Name), NA(), NA(), NA(), NA()}
				switch {
				case v.NA != "":
					cells[6] = Text(v.NA)
				case c.Kind == stats.String:
					cells[5] = Text(v.S)
				case c.Kind == stats.Float:
					cells[4] = Float(v.F)
				default:
					cells[3] = Num(v.I)
				}
				if err := rw.Row(cells...); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return fmt.Errorf("table %s: %w", t.Name, err)
		}
	}
	return rw.Close()
}
