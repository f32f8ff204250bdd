package dataset

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/stats"
)

// longTable writes rep's table name as it is, each figure in a column of
// its own: a figure of any row may be NA in some run, so every figure's
// column is nullable and na_reason says why the row's NA figures are, and
// the files of every run share one schema.
func longTable(w io.Writer, rep *stats.Report, name string) error {
	t := rep.Table(name)
	if t == nil {
		return fmt.Errorf("stats has no table %s", name)
	}
	cols := make([]output.Column, 0, len(t.Columns)+1)
	for _, c := range t.Columns {
		typ := output.Int64
		switch c.Kind {
		case stats.String:
			typ = output.String
		case stats.Float:
			typ = output.Float64
		}
		cols = append(cols, output.Column{Name: c.Name, Type: typ, Nullable: true})
	}
	cols = append(cols, output.Column{Name: "na_reason", Type: output.String, Nullable: true})
	rw := output.New(w, format, cols)
	rw.SetStatus(rep.Status)
	cells := make([]output.Cell, len(cols))
	var reasons []string
	err := t.Each(func(r []stats.Value) error {
		reasons = reasons[:0]
		for i, c := range t.Columns {
			v := r[i]
			switch {
			case v.NA != "":
				cells[i] = output.NA()
				if !slices.Contains(reasons, v.NA) {
					reasons = append(reasons, v.NA)
				}
			case c.Kind == stats.String:
				cells[i] = output.Text(v.S)
			case c.Kind == stats.Float:
				cells[i] = output.Float(v.F)
			default:
				cells[i] = output.Num(v.I)
			}
		}
		cells[len(cells)-1] = output.NA()
		if len(reasons) > 0 {
			cells[len(cells)-1] = output.Text(strings.Join(reasons, "; "))
		}
		return rw.Row(cells...)
	})
	if err != nil {
		return err
	}
	return rw.Close()
}
