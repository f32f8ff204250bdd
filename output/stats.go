package output

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"maps"
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

// statsCell renders a value for a table by its column's unit: a name
// ending in _bytes or starting bytes_ is a size, one ending in _ns or
// holding _ns_ (stall_ns_per_token) a time.
func statsCell(c stats.Column, v stats.Value) Cell {
	if strings.HasPrefix(c.Name, "bytes_") {
		c.Name += "_bytes"
	} else if strings.Contains(c.Name, "_ns_") {
		c.Name += "_ns"
	}
	if cell, ok := commonCell(c, v); ok {
		return cell
	}
	switch {
	case c.Kind == stats.Int && v.I >= 0 && strings.HasSuffix(c.Name, "_bytes"):
		return Bytes(uint64(v.I))
	case c.Kind == stats.Int && v.I >= 0 && strings.HasSuffix(c.Name, "_ns"):
		return Duration(uint64(v.I))
	case c.Kind == stats.Int:
		return Num(v.I)
	case strings.HasSuffix(c.Name, "_bytes") && v.F >= 0:
		return TextAs("", units.Bytes(float64(uint64(v.F+0.5))))
	case strings.HasSuffix(c.Name, "_ns") && v.F >= 0:
		return TextAs("", units.Duration(v.F))
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
				case c.IsNone(v):
					m[c.Name] = nil
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

// TableNA is what a stats table export says of its NA figures beside its
// rows: in its sidecar (Sidecar) and one note on stderr. A column's
// reason is in its rows only where the reasons differ from row to row.
type TableNA struct {
	// Every maps each column NA in every row for one reason to why.
	Every map[string]string
	// LeftOut are the columns of Every the export left out (not all).
	LeftOut []string
	// Some maps each column NA in some rows for one reason to why.
	Some map[string]string
	// PerRow are the columns NA for reasons that differ by row: each has
	// a nullable <name>_na_reason column beside it, null where the figure
	// is measured.
	PerRow []string
}

// Notes say once per reason which columns are NA, each named with
// prefix ("TABLE." or ""), in reason order: "COLS: why", "COLS (some
// rows): why", "COL (some rows): a reason per row in COL_na_reason".
// Columns left out say so.
func (na *TableNA) Notes(prefix string) []string {
	byReason := map[string][]string{}
	add := func(why, col string) { byReason[why] = append(byReason[why], prefix+col) }
	for col, why := range na.Every {
		if slices.Contains(na.LeftOut, col) {
			add(why, col+" (left out)")
		} else {
			add(why, col)
		}
	}
	for col, why := range na.Some {
		add(why, col+" (some rows)")
	}
	for _, col := range na.PerRow {
		add("a reason per row in "+prefix+naKey(col), col+" (some rows)")
	}
	var notes []string
	for _, why := range slices.Sorted(maps.Keys(byReason)) {
		notes = append(notes, strings.Join(slices.Sorted(slices.Values(byReason[why])), ", ")+": "+why)
	}
	return notes
}

// set tells rw the reasons of the columns NA for one reason.
func (na *TableNA) set(rw Writer) {
	for _, m := range []map[string]string{na.Every, na.Some} {
		for _, col := range slices.Sorted(maps.Keys(m)) {
			if !slices.Contains(na.LeftOut, col) {
				rw.SetNA(col, m[col])
			}
		}
	}
}

// Sidecar is the sidecar of a table with na of the run in run.
func (na *TableNA) Sidecar(run, status string) *Sidecar {
	s := NewSidecar(run, status, nil)
	na.AddTo(s)
	return s
}

// AddTo puts na's columns into the sidecar s of an export that carries
// them beside others.
func (na *TableNA) AddTo(s *Sidecar) {
	maps.Copy(s.NA, na.Every)
	s.LeftOut = append(s.LeftOut, na.LeftOut...)
	if len(na.Some)+len(na.PerRow) > 0 {
		if s.SomeRowsNA == nil {
			s.SomeRowsNA = map[string]string{}
		}
		maps.Copy(s.SomeRowsNA, na.Some)
		for _, col := range na.PerRow {
			s.SomeRowsNA[col] = "reasons differ by row: " + naKey(col)
		}
	}
}

// StatsTable writes one table of stats in format, for programs. A column
// NA in every row for one reason (a figure the run's tier did not
// measure) is left out, unless all; a column NA for one reason is null
// where NA, its reason in na (the caller's sidecar and note, Parquet's
// key-value metadata); only a column whose reasons differ by row gets a
// <name>_na_reason column beside it, so that no reason is lost.
func StatsTable(w io.Writer, format Format, status string, t *stats.Table, all bool) (na TableNA, err error) {
	cols, perRow, na, err := statsColumns(t, all)
	if err != nil {
		return na, err
	}
	rw := New(w, format, cols)
	rw.SetStatus(status)
	na.set(rw)
	cells := make([]Cell, 0, len(cols))
	err = t.Each(func(r []stats.Value) error {
		cells = cells[:0]
		for i, c := range t.Columns {
			v := r[i]
			if slices.Contains(na.LeftOut, c.Name) {
				continue
			}
			cells = append(cells, formatCell(format, c, v))
			if perRow[i] {
				cells = append(cells, OptText(v.NA))
			}
		}
		return rw.Row(cells...)
	})
	if err != nil {
		return na, err
	}
	return na, rw.Close()
}

// formatCell is a stats value as a cell of format.
func formatCell(format Format, c stats.Column, v stats.Value) Cell {
	if format == Table {
		// A person reads sizes and times in their units.
		return statsCell(c, v)
	}
	if cell, ok := commonCell(c, v); ok {
		return cell
	}
	if c.Kind == stats.Float {
		return Float(v.F)
	}
	return Num(v.I)
}

// commonCell is a value's cell where every format writes it alike (NA,
// none, a string); ok is false for a number.
func commonCell(c stats.Column, v stats.Value) (cell Cell, ok bool) {
	switch {
	case v.NA != "":
		return NA(), true
	case c.IsNone(v):
		return None(), true
	case c.Kind == stats.String:
		return Text(v.S), true
	}
	return Cell{}, false
}

// statsColumns types a stats table's columns and sorts its NA figures
// (TableNA): perRow says which columns have a reason column.
func statsColumns(t *stats.Table, all bool) (cols []Column, perRow []bool, na TableNA, err error) {
	perRow = make([]bool, len(t.Columns))
	// reason is a column's one reason so far; naRows its NA rows; none
	// whether a row is none (stats.Column.NoneBelowZero).
	reason := make([]string, len(t.Columns))
	naRows := make([]int, len(t.Columns))
	none := make([]bool, len(t.Columns))
	rows := 0
	if err := t.Each(func(r []stats.Value) error {
		for i := range r {
			none[i] = none[i] || t.Columns[i].IsNone(r[i])
			switch why := r[i].NA; {
			case why == "":
			case naRows[i] == 0:
				reason[i] = why
				naRows[i]++
			default:
				perRow[i] = perRow[i] || why != reason[i]
				naRows[i]++
			}
		}
		rows++
		return nil
	}); err != nil {
		return nil, nil, na, err
	}
	na = TableNA{Every: map[string]string{}, LeftOut: []string{}, Some: map[string]string{}}
	for i, c := range t.Columns {
		oneReason := naRows[i] > 0 && !perRow[i]
		every := oneReason && naRows[i] == rows
		if every {
			na.Every[c.Name] = reason[i]
		}
		if every && !all {
			na.LeftOut = append(na.LeftOut, c.Name)
			continue
		}
		typ := Int64
		switch c.Kind {
		case stats.String:
			typ = String
		case stats.Float:
			typ = Float64
		}
		cols = append(cols, Column{Name: c.Name, Type: typ, Nullable: naRows[i] > 0 || none[i]})
		switch {
		case perRow[i]:
			na.PerRow = append(na.PerRow, c.Name)
			cols = append(cols, Column{Name: c.Name + "_na_reason", Type: String, Nullable: true})
		case oneReason && !every:
			na.Some[c.Name] = reason[i]
		}
	}
	return cols, perRow, na, nil
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
				case c.IsNone(v):
					// None: every value column null, and no reason.
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
