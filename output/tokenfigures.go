package output

import (
	"fmt"

	"github.com/iocorr/iocorr/stats"
)

// TokenFigures are the figures of a stats table with a row per token
// (stats.IOShapeTokensTable: token, phase, figures…), for the per-token
// outputs (query --by token, export faults-per-token) to carry beside
// their own under the table's column names. Every column is kept; NA
// says why a figure is NA, as a stats table export's does.
type TokenFigures struct {
	t      *stats.Table
	byTok  map[int64][]stats.Value
	cols   []Column // of the figures, reason columns included
	perRow []bool   // by the table's column
	NA     TableNA
}

// NewTokenFigures reads t, whose first two columns are the token and
// its phase.
func NewTokenFigures(t *stats.Table) (*TokenFigures, error) {
	if len(t.Columns) < 2 || t.Columns[0].Name != "token" || t.Columns[1].Name != "phase" {
		return nil, fmt.Errorf("table %s has no token and phase columns first", t.Name)
	}
	cols, perRow, na, err := statsColumns(t, true)
	if err != nil {
		return nil, err
	}
	f := &TokenFigures{t: t, byTok: map[int64][]stats.Value{}, cols: cols[2:], perRow: perRow, NA: na}
	err = t.Each(func(r []stats.Value) error {
		f.byTok[r[0].I] = append([]stats.Value(nil), r...)
		return nil
	})
	return f, err
}

// columns appends the figures' columns, nullable each: a token may be
// missing from the table.
func (f *TokenFigures) columns(dst []Column) []Column {
	if f == nil {
		return dst
	}
	for _, c := range f.cols {
		c.Nullable = true
		dst = append(dst, c)
	}
	return dst
}

// cells appends token's figures in format.
func (f *TokenFigures) cells(dst []Cell, token uint32, format Format) []Cell {
	if f == nil {
		return dst
	}
	r, ok := f.byTok[int64(token)]
	for i := 2; i < len(f.t.Columns); i++ {
		if !ok {
			dst = append(dst, NA())
			if f.perRow[i] {
				dst = append(dst, None())
			}
			continue
		}
		dst = append(dst, formatCell(format, f.t.Columns[i], r[i]))
		if f.perRow[i] {
			dst = append(dst, OptText(r[i].NA))
		}
	}
	return dst
}

// set tells rw why the figures' columns are NA.
func (f *TokenFigures) set(rw Writer) {
	if f != nil {
		f.NA.set(rw)
	}
}
