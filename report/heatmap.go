package report

import (
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// The pieces both kinds of heatmap share (offset × token, layer ×
// expert): the grid, its colours, its colour bar.

func grid(c, r int) [][]float64 {
	g := make([][]float64, c)
	for i := range g {
		g[i] = make([]float64, r)
	}
	return g
}

// gridXYZ is a heatmap's grid: Z is already the value drawn (NaN for
// empty cells).
type gridXYZ struct {
	z      [][]float64 // [col][row]
	x0, dx float64
	y0, dy float64
}

func (g *gridXYZ) Dims() (int, int)   { return len(g.z), len(g.z[0]) }
func (g *gridXYZ) Z(c, r int) float64 { return g.z[c][r] }
func (g *gridXYZ) X(c int) float64    { return g.x0 + (float64(c)+0.5)*g.dx }
func (g *gridXYZ) Y(r int) float64    { return g.y0 + (float64(r)+0.5)*g.dy }
func (g *gridXYZ) minMax() (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, col := range g.z {
		for _, v := range col {
			if !math.IsNaN(v) {
				lo, hi = min(lo, v), max(hi, v)
			}
		}
	}
	if lo > hi {
		return 0, 1
	}
	if lo == hi {
		hi = lo + 1
	}
	return lo, hi
}

// scaledGrid repeats each cell of a grid fx × fy times.
type scaledGrid struct {
	g      *gridXYZ
	fx, fy int
}

func (s *scaledGrid) Dims() (int, int) {
	c, r := s.g.Dims()
	return c * s.fx, r * s.fy
}
func (s *scaledGrid) Z(c, r int) float64 { return s.g.Z(c/s.fx, r/s.fy) }
func (s *scaledGrid) X(c int) float64 {
	return s.g.x0 + (float64(c)+0.5)*s.g.dx/float64(s.fx)
}
func (s *scaledGrid) Y(r int) float64 {
	return s.g.y0 + (float64(r)+0.5)*s.g.dy/float64(s.fy)
}

func colorMap() palette.ColorMap { return moreland.ExtendedBlackBody() }

// heatMap is the heatmaps' colours: black body from black to yellow, its
// palest part left out so that no value looks like the grey of an empty
// cell.
type heatMap struct {
	base     palette.ColorMap
	min, max float64
}

func newHeatMap() *heatMap {
	b := colorMap()
	b.SetMin(0)
	b.SetMax(1)
	return &heatMap{base: b, min: 0, max: 1}
}

func (h *heatMap) At(v float64) (color.Color, error) {
	if h.max <= h.min {
		return h.base.At(0)
	}
	return h.base.At(0.82 * min(max((v-h.min)/(h.max-h.min), 0), 1))
}
func (h *heatMap) Max() float64       { return h.max }
func (h *heatMap) Min() float64       { return h.min }
func (h *heatMap) SetMax(v float64)   { h.max = v }
func (h *heatMap) SetMin(v float64)   { h.min = v }
func (h *heatMap) Alpha() float64     { return h.base.Alpha() }
func (h *heatMap) SetAlpha(a float64) { h.base.SetAlpha(a) }
func (h *heatMap) Palette(n int) palette.Palette {
	cs := make([]color.Color, n)
	for i := range cs {
		cs[i], _ = h.At(h.min + (h.max-h.min)*float64(i)/float64(max(n-1, 1)))
	}
	return colors(cs)
}

type colors []color.Color

func (c colors) Colors() []color.Color { return c }

// addHeatMap adds g to p coloured from lo to hi, empty cells grey, and
// gives the heatmap and its colours (for the colour bar).
func addHeatMap(p *plot.Plot, g plotter.GridXYZ, lo, hi float64) (*plotter.HeatMap, *heatMap) {
	cm := newHeatMap()
	cm.SetMin(lo)
	cm.SetMax(hi)
	hm := plotter.NewHeatMap(g, cm.Palette(256))
	hm.Min, hm.Max = lo, hi
	hm.NaN = colEmpty
	p.Add(hm)
	return hm, cm
}

// colourBar is a vertical colour scale for a heatmap's colour map.
func colourBar(cm palette.ColorMap, label string) *plot.Plot {
	cb := plot.New()
	cb.HideX()
	cb.Y.Label.Text = label
	cb.Add(&plotter.ColorBar{ColorMap: cm, Vertical: true})
	return cb
}

// splitBar keeps the right of a canvas for a colour bar.
func splitBar(dc draw.Canvas) (main, bar draw.Canvas) {
	const w = 3 * vg.Centimeter
	main, bar = dc, dc
	main.Max.X -= w
	bar.Min.X = dc.Max.X - w
	bar.Min.Y += 1.5 * vg.Centimeter
	bar.Max.Y -= 1 * vg.Centimeter
	return main, bar
}
