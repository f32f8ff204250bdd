package report

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/stats"
)

// expertHeatmap: layer (y) × expert (x), decode activations or decode
// device bytes read.
func (r *run) expertHeatmap(ev *events, bytes bool) (*Chart, string) {
	layers, experts := r.moeLayers()
	name, title, unit := "expert_activations", "Router picks per layer × expert (decode)", "activations"
	var val [][]float64
	why := ""
	if bytes {
		name, title, unit = "expert_bytes_read", "Device bytes read per layer × expert (decode)", "MiB read"
		val = expertBytes(ev, layers, experts)
	} else {
		val, why = r.expertActivations(layers, experts)
	}
	g, hi := expertGrid(val, len(layers))
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "expert"
	p.Y.Label.Text = "layer"
	_, cm := addHeatMap(p, g, 0, hi)
	p.X.Tick.Marker = intTicks(experts, func(i int) string { return fmt.Sprint(i) })
	p.Y.Tick.Marker = intTicks(len(layers), func(i int) string { return fmt.Sprint(layers[len(layers)-1-i]) })
	cb := colourBar(cm, unit)
	caption := fmt.Sprintf("%s in decode tokens, %d MoE layers × %d experts; brighter is more, grey none. Hover a cell for its value.", title[:strings.Index(title, " (")], len(layers), experts)
	if bytes {
		caption = fmt.Sprintf("Device bytes read from each expert's slice of the layer's *_exps tensors in decode tokens, %d MoE layers × %d experts; brighter is more, grey none. Hover a cell for its value.", len(layers), experts)
	}
	c := &Chart{Name: name, Title: title, Caption: caption, W: 19 * vg.Centimeter, H: vg.Length(max(8, min(24, 3+0.6*float64(len(layers))))) * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		main, bar := splitBar(dc)
		p.Draw(main)
		cb.Draw(bar)
		return cellHovers(p, main, layers, val, bytes)
	}
	return c, why
}

// moeLayers gives the layers that have *_exps tensors, in order, and the
// most experts any of them has.
func (r *run) moeLayers() (layers []int, experts int) {
	layers = []int{}
	seen := map[int]bool{}
	for i := range r.Store.Tensors {
		t := &r.Store.Tensors[i]
		if !t.Pseudo() && t.Experts > 0 && t.Layer >= 0 {
			experts = max(experts, t.Experts)
			if !seen[t.Layer] {
				seen[t.Layer] = true
				layers = append(layers, t.Layer)
			}
		}
	}
	slices.Sort(layers)
	return layers, experts
}

// layerIndex maps each layer to its place in layers.
func layerIndex(layers []int) map[int]int {
	li := map[int]int{}
	for i, l := range layers {
		li[l] = i
	}
	return li
}

// expertBytes is the decode MiB read of each [expert][layer index] slice.
func expertBytes(ev *events, layers []int, experts int) [][]float64 {
	val := grid(experts, len(layers))
	li := layerIndex(layers)
	for k, v := range ev.expBytes {
		if i, ok := li[k[0]]; ok && k[1] < experts {
			val[k[1]][i] += v / (1 << 20)
		}
	}
	return val
}

// expertActivations is the decode router picks of each [expert][layer
// index], from stats' expert_activations table, or why there are none.
func (r *run) expertActivations(layers []int, experts int) ([][]float64, string) {
	val := grid(experts, len(layers))
	li := layerIndex(layers)
	rows, why := r.table("expert_activations", "phase", "layer", "expert", "activations")
	for _, m := range rows {
		// A layer whose decode picks were not all seen is NA (the
		// report's notes say why): left grey, not summed as NaN.
		if m["phase"].S != "decode" || m["activations"].NA != "" {
			continue
		}
		if i, ok := li[int(m["layer"].I)]; ok && int(m["expert"].I) < experts {
			val[m["expert"].I][i] += fv(m["activations"])
		}
	}
	return val, why
}

// expertGrid is the grid drawn of val, NaN where zero, and its largest
// value (1 when all are zero). Layer i is drawn in row len-1-i, so that
// layer 0 is at the top.
func expertGrid(val [][]float64, layers int) (*gridXYZ, float64) {
	g := &gridXYZ{z: grid(len(val), layers), x0: -0.5, dx: 1, y0: -0.5, dy: 1}
	hi := 0.0
	for e, col := range val {
		for i, v := range col {
			hi = max(hi, v)
			g.z[e][layers-1-i] = math.NaN()
			if v > 0 {
				g.z[e][layers-1-i] = v
			}
		}
	}
	if hi == 0 {
		hi = 1
	}
	return g, hi
}

// cellHovers gives each layer × expert cell its value.
func cellHovers(p *plot.Plot, main draw.Canvas, layers []int, val [][]float64, bytes bool) []Hover {
	da := p.DataCanvas(main)
	tx, ty := p.Transforms(&da)
	var hs []Hover
	for e := range val {
		for i, l := range layers {
			x0, x1 := tx(float64(e)-0.5), tx(float64(e)+0.5)
			row := float64(len(layers) - 1 - i)
			y0, y1 := ty(row-0.5), ty(row+0.5)
			v := fmt.Sprintf("%.0f activations", val[e][i])
			if bytes {
				v = units.Bytes(val[e][i]*(1<<20)) + " read"
			}
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: min(x0, x1), Y: min(y0, y1)}, Max: vg.Point{X: max(x0, x1), Y: max(y0, y1)}},
				Text: fmt.Sprintf("layer %d, expert %d: %s (decode)", l, e, v)})
		}
	}
	return hs
}

func intTicks(n int, label func(int) string) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		step := max(1, n/24)
		var t []plot.Tick
		for i := 0; i < n; i++ {
			if i%step == 0 {
				t = append(t, plot.Tick{Value: float64(i), Label: label(i)})
			}
		}
		return t
	})
}

// cacheCurves: hit rate against K experts per layer for LRU, LFU and
// Belady's optimum, the run's real hit rate marked.
func (r *run) cacheCurves() (*Chart, string) {
	rows, why := r.table("cache_sim", "policy", "k_experts", "hit_rate_ratio", "hit_rate_after_warmup_ratio", "bytes_read_per_token_bytes")
	p := plot.New()
	p.Title.Text = "Expert-cache hit rate against K experts cached per layer (decode)"
	p.X.Label.Text = "K (experts cached per MoE layer)"
	p.Y.Label.Text = "hit rate"
	p.Y.Min, p.Y.Max = 0, 1
	p.X.Tick.Marker = tokenTicks{} // whole numbers of experts
	p.Legend.Top = true
	p.Legend.Left = true
	pts := policyLines(p, rows)
	realLine, realNote := realHitRate(rows)
	if realLine != nil {
		p.Add(realLine)
	}
	caption := "Share of the router's decode picks an expert cache of K experts per layer would have held: LRU, LFU and Belady's offline optimum (stats' cache_sim), beside the share the real run's page cache held (dashed)."
	if realNote != "" {
		caption += " The " + strings.TrimPrefix(realNote, "the ") + "."
	}
	c := &Chart{Name: "cache_hit_rate", Title: p.Title.Text, Caption: caption, W: 18 * vg.Centimeter, H: 11 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		hs := pointHovers(p, dc, pts, 5)
		if realLine != nil {
			da := p.DataCanvas(dc)
			_, ty := p.Transforms(&da)
			y := ty(realLine.y)
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: da.Min.X, Y: y - 3}, Max: vg.Point{X: da.Max.X, Y: y + 3}}, Text: realLine.label})
		}
		return hs
	}
	switch {
	case why != "":
		return c, why
	case len(pts) == 0:
		return c, "no cache simulation rows: the run has no decode picks"
	}
	return c, realNote
}

// policyLines draws the hit rate of each simulated policy against K and
// gives the points drawn, with their hover text.
func policyLines(p *plot.Plot, rows []map[string]stats.Value) []hoverPoint {
	var pts []hoverPoint
	for _, pol := range []string{"lru", "lfu", "belady"} {
		var xy plotter.XYs
		for _, m := range rows {
			if m["policy"].S != pol || m["k_experts"].NA != "" || m["hit_rate_ratio"].NA != "" {
				continue
			}
			k, h := float64(m["k_experts"].I), fv(m["hit_rate_ratio"])
			xy = append(xy, plotter.XY{X: k, Y: h})
			pts = append(pts, hoverPoint{k, h, fmt.Sprintf("%s, K = %.0f: hit rate %.3f, after warm-up %s; %s read per decode token",
				pol, k, h, fmtVal(m["hit_rate_after_warmup_ratio"], "ratio"), fmtVal(m["bytes_read_per_token_bytes"], "bytes"))})
		}
		if len(xy) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xy)
		if err != nil {
			continue
		}
		l.Color, s.Color = colPolicy[pol], colPolicy[pol]
		s.Shape = draw.CircleGlyph{}
		p.Add(l, s)
		p.Legend.Add(pol, l, s)
	}
	return pts
}

// realHitRate is the line of the real run's hit rate, or why it is not
// drawn.
func realHitRate(rows []map[string]stats.Value) (line *hline, note string) {
	for _, m := range rows {
		if m["policy"].S != "real" {
			continue
		}
		if v := m["hit_rate_ratio"]; v.NA != "" {
			note = "the real hit rate is not marked: " + v.NA
		} else {
			line = &hline{y: v.F, label: fmt.Sprintf("real run: %.3f (picks whose expert was resident)", v.F)}
		}
	}
	return line, note
}

// hline is a dashed horizontal line at y, labelled.
type hline struct {
	y     float64
	label string
}

func (h *hline) Plot(c draw.Canvas, p *plot.Plot) {
	_, ty := p.Transforms(&c)
	y := ty(h.y)
	sty := draw.LineStyle{Color: colReal, Width: vg.Points(1.5), Dashes: []vg.Length{vg.Points(6), vg.Points(3)}}
	c.StrokeLine2(sty, c.Min.X, y, c.Max.X, y)
	ts := draw.TextStyle{Color: colReal, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler}
	ts.Font.Size = vg.Points(9)
	c.FillText(ts, vg.Point{X: c.Min.X + 4, Y: y + 3}, h.label)
}

func (h *hline) DataRange() (xmin, xmax, ymin, ymax float64) {
	return math.Inf(1), math.Inf(-1), h.y, h.y
}
