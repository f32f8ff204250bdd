package report

import (
	"fmt"
	"image/color"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/stats"
)

// What every family of charts shares: the colours, the figures read from
// stats' tables, the hover areas of points, the whole-number ticks. The
// families are apart: chart_offset.go (file offset × token heatmaps, over
// events.go's one pass), chart_token.go (per-token lines), chart_bars.go
// (per-layer and per-role bars), chart_moe.go (expert heatmaps, cache
// curves), chart_sweep.go (against the memory budget); heatmap.go has
// what both kinds of heatmap draw with.

var (
	colPrefill = color.RGBA{R: 214, G: 96, B: 77, A: 255}
	colDecode  = color.RGBA{R: 33, G: 102, B: 172, A: 255}
	colEmpty   = color.RGBA{R: 222, G: 226, B: 230, A: 255}
	colReal    = color.RGBA{R: 0, G: 0, B: 0, A: 255}
	colPolicy  = map[string]color.Color{
		"lru":    color.RGBA{R: 27, G: 158, B: 119, A: 255},
		"lfu":    color.RGBA{R: 217, G: 95, B: 2, A: 255},
		"belady": color.RGBA{R: 117, G: 112, B: 179, A: 255},
	}
)

// hoverPoint is a drawn point and the text shown over it.
type hoverPoint struct {
	x, y float64
	text string
}

// pointHovers gives each point of p a square hover area, half wide on
// each side of it.
func pointHovers(p *plot.Plot, dc draw.Canvas, pts []hoverPoint, half vg.Length) []Hover {
	da := p.DataCanvas(dc)
	tx, ty := p.Transforms(&da)
	var hs []Hover
	for _, q := range pts {
		x, y := tx(q.x), ty(q.y)
		hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: x - half, Y: y - half}, Max: vg.Point{X: x + half, Y: y + half}}, Text: q.text})
	}
	return hs
}

// tableRows gives a stats table's rows as maps by column name.
func tableRows(t *stats.Table) []map[string]stats.Value {
	if t == nil {
		return nil
	}
	out := make([]map[string]stats.Value, len(t.Rows))
	for i, row := range t.Rows {
		m := map[string]stats.Value{}
		for j, c := range t.Columns {
			m[c.Name] = row[j]
		}
		out[i] = m
	}
	return out
}

func fv(v stats.Value) float64 {
	if v.NA != "" {
		return math.NaN()
	}
	if v.F != 0 {
		return v.F
	}
	return float64(v.I)
}

func fmtVal(v stats.Value, unit string) string {
	if v.NA != "" {
		return "NA (" + v.NA + ")"
	}
	x := fv(v)
	switch unit {
	case "bytes":
		return units.Bytes(x)
	case "ns":
		return units.Duration(x)
	case "ratio":
		return fmt.Sprintf("%.3g", x)
	}
	return fmt.Sprintf("%.0f", x)
}

// table gives the rows of a stats table whose columns include cols, or
// no rows and why: a chart never draws a missing figure as a zero.
func (r *run) table(name string, cols ...string) ([]map[string]stats.Value, string) {
	t := r.stats.Table(name)
	if t == nil {
		return nil, fmt.Sprintf("iocorr stats has no %s table", name)
	}
	for _, c := range cols {
		if !slices.ContainsFunc(t.Columns, func(x stats.Column) bool { return x.Name == c }) {
			return nil, fmt.Sprintf("iocorr stats' %s table has no %s column", name, c)
		}
	}
	return tableRows(t), ""
}

// decimal names 10^k with an SI prefix: 1, 10, 100, 1 k, 10 k…
func decimal(k int) string {
	if k < 0 {
		return fmt.Sprintf("1e%d ", k)
	}
	prefixes := []string{"", "k", "M", "G", "T", "P"}
	p := min(k/3, len(prefixes)-1)
	n := 1
	for range k - 3*p {
		n *= 10
	}
	return fmt.Sprintf("%d %s", n, prefixes[p])
}

// tokenTicks marks whole numbers (tokens, experts, MiB), about ten of
// them.
type tokenTicks struct{}

func (tokenTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	step := 1.0
	for span/step > 12 {
		switch {
		case step*2 >= span/12:
			step *= 2
		case step*5 >= span/12:
			step *= 5
		default:
			step *= 10
		}
	}
	var t []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi; v += step {
		t = append(t, plot.Tick{Value: v, Label: fmt.Sprint(int64(v))})
	}
	return t
}
