package output

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/units"
)

// Diff writes a comparison of two runs (package diff) as one row per
// group and counter: the group's key under the name of what it is grouped
// by (as query names it; a layer or expert an integer, null for none), which runs have the group ("both", "a" or "b"),
// the counter, its value in A and B, the change B − A and the ratio B / A.
// An NA cell is NA in a table, empty in CSV, null in JSON; na_reason says
// why. A table leaves na_reason out and lists the reasons after the rows,
// then the tensors only one run has; the other formats carry them in the
// rows (in) and leave the list to the caller.
func Diff(w io.Writer, r *diff.Result, format Format) error {
	table := format == Table
	key := Column{Name: r.By}
	switch r.By {
	case "token":
		key.Type = Uint32
	}
	intKey, pseudoCol := IntKey(r.By)
	if intKey {
		key.Type, key.Nullable = Int32, true
	}
	cols := []Column{key}
	pseudo := r.By == "request" || intKey && anyPseudo(len(r.Groups), func(i int) string { return r.Groups[i].Key })
	if pseudo {
		cols = append(cols, Column{Name: pseudoCol, Type: String, Nullable: true})
	}
	cols = append(cols, []Column{{Name: "in"}, {Name: "counter"}, {Name: "a", Type: Uint64, Nullable: true},
		{Name: "b", Type: Uint64, Nullable: true}, {Name: "delta", Type: Int64, Nullable: true}, {Name: "ratio", Type: Float64, Nullable: true}}...)
	if !table {
		cols = append(cols, Column{Name: "na_reason", Type: String, Nullable: true})
	}
	rw := New(w, format, cols)
	rw.SetStatus(r.Status())
	var reasons []string
	cells := make([]Cell, 0, len(cols))
	for gi := range r.Groups {
		g := &r.Groups[gi]
		key, name := Text(g.Key), None()
		switch r.By {
		case "token":
			if n, err := strconv.ParseUint(g.Key, 10, 32); err == nil {
				key = Num(n)
			}
		case "layer", "expert", "request":
			key, name = Key(g.Key)
		}
		for ci := range g.Cells {
			c := &g.Cells[ci]
			cells = append(cells[:0], key)
			if pseudo {
				cells = append(cells, name)
			}
			cells = append(cells, Text(g.In.String()), Text(c.Counter), sideCell(c.A, c.Unit), sideCell(c.B, c.Unit))
			why := c.DeltaNA
			if why != "" {
				cells = append(cells, NA(), NA())
			} else {
				cells = append(cells, deltaCell(c.Delta, c.Unit))
				if c.RatioNA != "" {
					why = c.RatioNA
					cells = append(cells, NA())
				} else {
					cells = append(cells, Float(c.Ratio))
				}
			}
			if !table {
				cells = append(cells, OptText(why))
			} else if why != "" && !slices.Contains(reasons, why) {
				reasons = append(reasons, why)
			}
			if err := rw.Row(cells...); err != nil {
				return err
			}
		}
	}
	if err := rw.Close(); err != nil {
		return err
	}
	if !table {
		return nil
	}
	for _, why := range reasons {
		if _, err := fmt.Fprintf(w, "NA: %s\n", why); err != nil {
			return err
		}
	}
	for _, only := range []struct {
		run   string
		names []string
	}{{"A", r.OnlyA}, {"B", r.OnlyB}} {
		if len(only.names) > 0 {
			if _, err := fmt.Fprintf(w, "%s\n", OnlyIn(only.run, only.names)); err != nil {
				return err
			}
		}
	}
	return nil
}

// OnlyIn says in one line which tensors only run has: their count and the
// first few names.
func OnlyIn(run string, names []string) string {
	const show = 8
	list := strings.Join(names[:min(show, len(names))], ", ")
	if len(names) > show {
		list += fmt.Sprintf(", … (%d more)", len(names)-show)
	}
	return fmt.Sprintf("only in run %s: %d tensors: %s", run, len(names), list)
}

// sideCell is a run's value, in its counter's unit.
func sideCell(s diff.Side, unit event.Unit) Cell {
	switch {
	case s.NA != "":
		return NA()
	case unit == event.UnitBytes:
		return Bytes(s.V)
	case unit == event.UnitNS:
		return Duration(s.V)
	}
	return Num(s.V)
}

// deltaCell is a signed change: raw in CSV and JSON, with its sign and
// unit in a table.
func deltaCell(d int64, unit event.Unit) Cell {
	c := Num(d)
	mag := float64(d)
	sign := "+"
	if d < 0 {
		mag, sign = -mag, "-"
	}
	switch unit {
	case event.UnitBytes:
		c.Human = sign + units.Bytes(mag)
	case event.UnitNS:
		c.Human = sign + units.Duration(mag)
	default:
		c.Human = sign + strconv.FormatFloat(mag, 'f', -1, 64)
	}
	if d == 0 {
		c.Human = strings.TrimPrefix(c.Human, "+")
	}
	return c
}
