package report

import (
	"cmp"
	"fmt"
	"image/color"
	"maps"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/sweep"
)

// events is the one pass over the run's events, binned for drawing.
type events struct {
	model    int   // the model file the heatmaps show, -1 when none
	lo, hi   int64 // its tensor bytes
	rowBytes int64
	rows     int
	cols     int
	maxTok   uint32
	bytes    [][]float64 // [col][row] device bytes read
	faults   [][]float64 // [col][row] major faults
	// Whole-run totals by tensor id, for hover text.
	tBytes, tFaults []float64
	late            int // events of a token after maxTok, not in the heatmaps
	// expBytes is the device bytes read of each (layer, expert) slice of
	// the *_exps tensors in decode tokens.
	expBytes map[[2]int]float64
}

func (e *events) col(tok uint32) int {
	return min(int(uint64(tok)*uint64(e.cols)/(uint64(e.maxTok)+1)), e.cols-1)
}

func (r *run) eventPass() (*events, error) {
	ev := &events{model: -1, expBytes: map[[2]int]float64{},
		tBytes: make([]float64, len(r.st.Tensors)), tFaults: make([]float64, len(r.st.Tensors))}
	// The model with the most tensors is drawn (llama.cpp runs load one).
	count := map[int]int{}
	for i := range r.st.Tensors {
		if t := &r.st.Tensors[i]; !t.Pseudo() && t.Model >= 0 {
			count[t.Model]++
		}
	}
	for m, n := range count {
		if ev.model < 0 || n > count[ev.model] || (n == count[ev.model] && m < ev.model) {
			ev.model = m
		}
	}
	ev.lo, ev.hi = math.MaxInt64, 0
	for i := range r.st.Tensors {
		if t := &r.st.Tensors[i]; !t.Pseudo() && t.Model == ev.model {
			ev.lo, ev.hi = min(ev.lo, t.Offset), max(ev.hi, t.Offset+t.Size)
		}
	}
	if ev.model < 0 || ev.hi <= ev.lo {
		ev.lo, ev.hi = 0, 1
	}
	pages := (ev.hi - ev.lo + kernel.PageSize - 1) / kernel.PageSize
	ev.rows = int(min(int64(HeatRows), max(pages, 1)))
	ev.rowBytes = (ev.hi - ev.lo + int64(ev.rows) - 1) / int64(ev.rows)
	for _, t := range r.tokens {
		ev.maxTok = max(ev.maxTok, t.Token)
	}
	// Events after the last call carry its token; none carries a later one.
	ev.cols = min(int(ev.maxTok)+1, HeatTokens)
	ev.bytes = grid(ev.cols, ev.rows)
	ev.faults = grid(ev.cols, ev.rows)
	err := r.st.Events(index.EventFilter{}, func(e *event.Event) error {
		if e.Tensor < event.FirstTensor || int(e.Tensor) >= len(r.st.Tensors) {
			return nil
		}
		t := &r.st.Tensors[e.Tensor]
		if e.Token > ev.maxTok && t.Model == ev.model && (e.Kind == event.KindBlock || e.Kind == event.KindFault) {
			ev.late++
		}
		switch {
		case e.Kind == event.KindBlock && e.Class == event.ClassRead:
			ev.tBytes[e.Tensor] += float64(e.Bytes)
			if t.Experts > 0 && t.ExpertStride > 0 && t.Layer >= 0 && e.Phase == event.PhaseDecode {
				// A slice may cross from one expert into the next.
				for o, end := e.Offset, e.Offset+int64(e.Bytes); o < end; {
					x := o / t.ExpertStride
					next := min(end, (x+1)*t.ExpertStride)
					ev.expBytes[[2]int{t.Layer, int(x)}] += float64(next - o)
					o = next
				}
			}
			if t.Model == ev.model && e.Token <= ev.maxTok {
				c := ev.col(e.Token)
				for o, end := t.Offset+e.Offset, t.Offset+e.Offset+int64(e.Bytes); o < end; {
					row := (o - ev.lo) / ev.rowBytes
					next := min(end, ev.lo+(row+1)*ev.rowBytes)
					if row >= 0 && row < int64(ev.rows) {
						ev.bytes[c][row] += float64(next - o)
					}
					o = next
				}
			}
		case e.Kind == event.KindFault && e.Class == event.ClassMajor:
			ev.tFaults[e.Tensor]++
			if t.Model == ev.model && e.Token <= ev.maxTok {
				if row := (t.Offset + e.Offset - ev.lo) / ev.rowBytes; row >= 0 && row < int64(ev.rows) {
					ev.faults[ev.col(e.Token)][row]++
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	return ev, nil
}

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

func colorMap() palette.ColorMap { return moreland.ExtendedBlackBody() }

// heatMap is the offset heatmaps' colours: black body from black to
// yellow, its palest part left out so that no value looks like the grey of
// an empty cell.
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

// band is a labelled stretch of the offset axis: a layer, or a tensor
// outside the layers.
type band struct {
	label  string
	lo, hi int64
	ids    []uint32
}

func (r *run) bands(model int) []band {
	var out []band
	byLayer := map[int]int{}
	ids := []uint32{}
	for i := range r.st.Tensors {
		if t := &r.st.Tensors[i]; !t.Pseudo() && t.Model == model {
			ids = append(ids, t.ID)
		}
	}
	slices.SortFunc(ids, func(a, b uint32) int { return cmp.Compare(r.st.Tensors[a].Offset, r.st.Tensors[b].Offset) })
	for _, id := range ids {
		t := &r.st.Tensors[id]
		if t.Layer >= 0 {
			if i, ok := byLayer[t.Layer]; ok {
				b := &out[i]
				b.lo, b.hi = min(b.lo, t.Offset), max(b.hi, t.Offset+t.Size)
				b.ids = append(b.ids, id)
				continue
			}
			byLayer[t.Layer] = len(out)
			out = append(out, band{label: fmt.Sprintf("blk.%d", t.Layer), lo: t.Offset, hi: t.Offset + t.Size, ids: []uint32{id}})
			continue
		}
		out = append(out, band{label: t.Role, lo: t.Offset, hi: t.Offset + t.Size, ids: []uint32{id}})
	}
	return out
}

// offsetTicks labels the offset axis with the layers and the tensors
// outside them, leaving out labels that would overlap.
func offsetTicks(bs []band, span int64) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ticks []plot.Tick
		last := math.Inf(-1)
		minGap := float64(span) / 40
		for _, b := range bs {
			mid := float64(b.lo+b.hi) / 2
			ticks = append(ticks, plot.Tick{Value: -float64(b.lo)})
			if mid-last >= minGap {
				ticks = append(ticks, plot.Tick{Value: -mid, Label: b.label})
				last = mid
			}
		}
		return ticks
	})
}

// offsetHeatmap: file offset (y) × token (x), coloured by device bytes
// read, or by major faults, on a log scale.
func (r *run) offsetHeatmap(ev *events, faults bool) (*Chart, string) {
	name, what, src := "offset_token_bytes", "device bytes read", ev.bytes
	if faults {
		name, what, src = "offset_token_faults", "major faults", ev.faults
	}
	// The offset axis is drawn negated so that the file's start is at the
	// top (gonum's inverted scale does not apply to raster heatmaps).
	g := &gridXYZ{z: grid(ev.cols, ev.rows), x0: 0, dx: float64(ev.maxTok+1) / float64(ev.cols), y0: -float64(ev.lo) - float64(ev.rows)*float64(ev.rowBytes), dy: float64(ev.rowBytes)}
	var total float64
	for c := range src {
		for rr, v := range src[c] {
			total += v
			// Row rr holds offsets from lo + rr×rowBytes: drawn from the top.
			at := ev.rows - 1 - rr
			g.z[c][at] = math.NaN()
			if v > 0 {
				g.z[c][at] = math.Log10(v)
			}
		}
	}
	lo, hi := g.minMax()
	lo = math.Floor(lo)
	hi = max(math.Ceil(hi), lo+1)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("File offset × token: %s", what)
	p.X.Label.Text = "token (llama_decode call; 0 = before the first)"
	p.Y.Label.Text = "model file offset"
	bs := r.bands(ev.model)
	p.Y.Tick.Marker = offsetTicks(bs, ev.hi-ev.lo)
	p.Y.Min, p.Y.Max = g.y0, -float64(ev.lo)
	p.X.Min, p.X.Max = 0, float64(ev.maxTok+1)
	p.X.Tick.Marker = tokenTicks{}
	cm := newHeatMap()
	cm.SetMin(lo)
	cm.SetMax(hi)
	hm := plotter.NewHeatMap(g, cm.Palette(256))
	hm.Min, hm.Max = lo, hi
	hm.NaN = colEmpty
	hm.Rasterized = true
	p.Add(hm)

	cb := colourBar(cm, what)
	cb.Y.Tick.Marker = plot.TickerFunc(func(a, b float64) []plot.Tick {
		var t []plot.Tick
		for k := math.Ceil(a); k <= b; k++ {
			l := decimal(int(k))
			if !faults {
				l += "B"
			}
			t = append(t, plot.Tick{Value: k, Label: l})
		}
		return t
	})

	binNote := ""
	if g.dx > 1 {
		binNote = fmt.Sprintf(" Each column sums about %.3g tokens.", g.dx)
	}
	caption := fmt.Sprintf("%s of %s by file offset (rows of %s) and token (%d columns), log colour scale; grey: none. %s in all.%s Hover a layer for its totals.",
		strings.ToUpper(what[:1])+what[1:], r.modelName(ev.model), units.Bytes(float64(ev.rowBytes)), ev.cols, fmtTotal(total, faults), binNote)
	c := &Chart{Name: name, Title: p.Title.Text, Caption: caption, W: 22 * vg.Centimeter, H: 16 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		main, bar := splitBar(dc)
		hm.GridXYZ = g
		if forPNG {
			hm.GridXYZ = &scaledGrid{g, max(1, 1200/ev.cols), max(1, 1200/ev.rows)}
		}
		p.Draw(main)
		cb.Draw(bar)
		da := p.DataCanvas(main)
		_, ty := p.Transforms(&da)
		var hs []Hover
		for _, b := range bs {
			var by, fa float64
			names := []string{}
			for _, id := range b.ids {
				by += ev.tBytes[id]
				fa += ev.tFaults[id]
				names = append(names, r.st.Tensors[id].Name)
			}
			y0, y1 := ty(-float64(b.lo)), ty(-float64(b.hi))
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: da.Min.X, Y: min(y0, y1)}, Max: vg.Point{X: da.Max.X, Y: max(y0, y1)}},
				Text: fmt.Sprintf("%s, offsets %d–%d (%s): %s read from the device, %.0f major faults over the run\n%s",
					b.label, b.lo, b.hi, units.Bytes(float64(b.hi-b.lo)), units.Bytes(by), fa, strings.Join(names, ", "))})
		}
		return hs
	}
	note := ""
	if len(r.meta.Models) > 1 {
		note = fmt.Sprintf("the offset heatmaps show %s only, of %d model files", r.modelName(ev.model), len(r.meta.Models))
	}
	return c, note
}

func fmtTotal(v float64, count bool) string {
	if count {
		return fmt.Sprintf("%.0f", v)
	}
	return units.Bytes(v)
}

func (r *run) modelName(m int) string {
	if m >= 0 && m < len(r.meta.Models) {
		return r.meta.Models[m].Path
	}
	return "no model file"
}

// perTokenLine: bytes read (or fault stall) per token, prefill and
// decode drawn apart. Runs longer than LinePoints tokens are drawn as
// means of consecutive tokens of one phase.
func (r *run) perTokenLine(stall bool) (*Chart, string) {
	name, title, ylab := "token_bytes_read", "Device bytes read per token", "MiB read"
	val := func(t *event.TokenInfo) float64 { return float64(t.ReadBytes) / (1 << 20) }
	if stall {
		name, title, ylab = "token_stall", "Fault stall per token", "stall (ms, summed over threads)"
		val = func(t *event.TokenInfo) float64 { return float64(t.StallNS) / 1e6 }
	}
	group := max(1, (len(r.tokens)+LinePoints-1)/LinePoints)
	type pt struct {
		x, y  float64
		n     int
		first uint32
		last  uint32
		phase uint8
		ntoks int32
	}
	var pts []pt
	for i := range r.tokens {
		t := &r.tokens[i]
		if n := len(pts); n > 0 && pts[n-1].phase == t.Phase && pts[n-1].n < group {
			q := &pts[n-1]
			q.x += float64(t.Token)
			q.y += val(t)
			q.n++
			q.last = t.Token
			q.ntoks += t.NTokens
			continue
		}
		pts = append(pts, pt{x: float64(t.Token), y: val(t), n: 1, first: t.Token, last: t.Token, phase: t.Phase, ntoks: t.NTokens})
	}
	for i := range pts {
		pts[i].x /= float64(pts[i].n)
		pts[i].y /= float64(pts[i].n)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "token (llama_decode call)"
	p.X.Tick.Marker = tokenTicks{}
	p.Y.Label.Text = ylab
	p.Legend.Top = true
	// Amounts start at zero; the top sixth is left to the legend.
	p.Y.Min = 0
	for _, q := range pts {
		p.Y.Max = max(p.Y.Max, q.y*1.18)
	}
	var firstDecode float64 = -1
	for _, ph := range []struct {
		phase uint8
		name  string
		col   color.Color
	}{{event.PhasePrefill, "prefill", colPrefill}, {event.PhaseDecode, "decode", colDecode}} {
		var xy plotter.XYs
		for _, q := range pts {
			if q.phase == ph.phase {
				xy = append(xy, plotter.XY{X: q.x, Y: q.y})
				if ph.phase == event.PhaseDecode && firstDecode < 0 {
					firstDecode = float64(q.first)
				}
			}
		}
		if len(xy) == 0 {
			continue
		}
		l, s, err := plotter.NewLinePoints(xy)
		if err != nil {
			continue
		}
		l.Color, s.Color = ph.col, ph.col
		s.Shape = draw.CircleGlyph{}
		s.Radius = vg.Points(2.5)
		if len(pts) > 60 {
			s.Radius = vg.Points(1) // dots, not beads
		}
		p.Add(l, s)
		p.Legend.Add(ph.name, l, s)
	}
	if firstDecode >= 0 {
		p.Add(&vline{x: firstDecode - 0.5, label: "decode starts"})
	}
	caption := fmt.Sprintf("%s, %d llama_decode calls; prefill in red, decode in blue, the dashed line where decode starts.", title, len(r.tokens))
	if group > 1 {
		caption += fmt.Sprintf(" Each point is the mean of up to %d consecutive calls of one phase.", group)
	}
	if stall {
		caption += " Stall is the fault latency summed over the faulting threads (as stats' fault_stall_per_token)."
	}
	c := &Chart{Name: name, Title: title, Caption: caption, W: 22 * vg.Centimeter, H: 9 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		da := p.DataCanvas(dc)
		tx, ty := p.Transforms(&da)
		var hs []Hover
		for _, q := range pts {
			x, y := tx(q.x), ty(q.y)
			what := fmt.Sprintf("token %d", q.first)
			if q.n > 1 {
				what = fmt.Sprintf("tokens %d–%d (mean of %d)", q.first, q.last, q.n)
			}
			v := fmt.Sprintf("%.3g MiB read", q.y)
			if stall {
				v = fmt.Sprintf("%.3g ms stalled", q.y)
			}
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: x - 4, Y: y - 4}, Max: vg.Point{X: x + 4, Y: y + 4}},
				Text: fmt.Sprintf("%s, %s (%d tokens in the batch): %s", what, event.PhaseName(q.phase), q.ntoks, v)})
		}
		return hs
	}
	if len(r.tokens) == 0 {
		return c, "no llama_decode call was recorded: the per-token charts are empty"
	}
	return c, ""
}

// vline is a dashed vertical line at x, labelled.
type vline struct {
	x     float64
	label string
}

func (v *vline) Plot(c draw.Canvas, p *plot.Plot) {
	tx, _ := p.Transforms(&c)
	x := tx(v.x)
	sty := draw.LineStyle{Color: color.Gray{Y: 90}, Width: vg.Points(1), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}
	c.StrokeLine2(sty, x, c.Min.Y, x, c.Max.Y)
	ts := draw.TextStyle{Color: color.Gray{Y: 60}, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler}
	ts.Font.Size = vg.Points(9)
	c.FillText(ts, vg.Point{X: x + 3, Y: c.Max.Y - 12}, v.label)
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

// bars draws labelled bars with one hover text each.
func bars(name, title, xlab, ylab, caption string, labels []string, vals []float64, hover []string, col color.Color) *Chart {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlab
	p.Y.Label.Text = ylab
	if len(vals) > 0 { // an empty chart keeps its axes; a note says why
		bc, err := plotter.NewBarChart(plotter.Values(vals), vg.Points(max(4, min(28, 420/float64(len(vals))))))
		if err == nil {
			bc.Color = col
			bc.LineStyle.Width = 0
			p.Add(bc)
		}
		p.NominalX(labels...)
	}
	if len(labels) > 16 {
		p.X.Tick.Label.Rotation = math.Pi / 2
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	c := &Chart{Name: name, Title: title, Caption: caption, W: 22 * vg.Centimeter, H: 10 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		da := p.DataCanvas(dc)
		tx, ty := p.Transforms(&da)
		var hs []Hover
		half := (tx(1) - tx(0)) / 2
		if len(vals) < 2 {
			half = 14
		}
		for i, v := range vals {
			x := tx(float64(i))
			top := max(ty(v), da.Min.Y+4)
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: x - half, Y: da.Min.Y}, Max: vg.Point{X: x + half, Y: top}}, Text: hover[i]})
		}
		return hs
	}
	return c
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

func (r *run) layerBars() (*Chart, string) {
	rows, why := r.table("layers", "layer", "bytes_read_bytes", "size_bytes", "reread_amplification_ratio")
	var labels, hover []string
	var vals []float64
	for _, m := range rows {
		l := m["layer"].I
		lab := fmt.Sprint(l)
		if l < 0 {
			lab = "none"
		}
		labels = append(labels, lab)
		vals = append(vals, fv(m["bytes_read_bytes"])/(1<<20))
		hover = append(hover, fmt.Sprintf("layer %s: %s read from the device, layer size %s, re-read amplification %s",
			lab, fmtVal(m["bytes_read_bytes"], "bytes"), fmtVal(m["size_bytes"], "bytes"), fmtVal(m["reread_amplification_ratio"], "ratio")))
	}
	c := bars("layer_bytes_read", "Device bytes read per layer", "layer (none: tensors outside the blocks)", "MiB read", "Device bytes read over the whole run, per layer (stats' layers table); hover a bar for its size and re-read amplification.",
		labels, vals, hover, colDecode)
	return c, why
}

// roleGroups are the bars of the per-role chart, in order.
var roleGroups = []string{"attn_q", "attn_k", "attn_v", "attn_o", "ffn_gate", "ffn_up", "ffn_down", "exps", "embeddings", "output", "other"}

// roleGroup puts a tensor role into one of roleGroups.
func roleGroup(role string) string {
	switch {
	case strings.HasSuffix(role, "_exps"):
		return "exps"
	case role == "attn_output":
		return "attn_o"
	case role == "token_embd":
		return "embeddings"
	case slices.Contains(roleGroups, role):
		return role
	}
	return "other"
}

func (r *run) roleBars() (*Chart, string) {
	type agg struct {
		read, faults, stall, size float64
		n                         int
	}
	by := map[string]*agg{}
	for _, g := range roleGroups {
		by[g] = &agg{}
	}
	rows, why := r.table("tensors", "role", "bytes_read_bytes", "major_faults", "fault_stall_ns", "size_bytes")
	other := map[string]bool{}
	for _, m := range rows {
		g := roleGroup(m["role"].S)
		if g == "other" {
			other[m["role"].S] = true
		}
		a := by[g]
		a.read += fv(m["bytes_read_bytes"])
		a.faults += fv(m["major_faults"])
		a.stall += fv(m["fault_stall_ns"])
		a.size += fv(m["size_bytes"])
		a.n++
	}
	var vals []float64
	var hover []string
	for _, g := range roleGroups {
		a := by[g]
		vals = append(vals, a.read/(1<<20))
		hover = append(hover, fmt.Sprintf("%s: %d tensors of %s; %s read from the device, %.0f major faults, %s fault stall",
			g, a.n, units.Bytes(a.size), units.Bytes(a.read), a.faults, units.Duration(a.stall)))
	}
	others := slices.Sorted(maps.Keys(other))
	caption := "Device bytes read over the whole run by tensor role: attention q/k/v/o, dense FFN gate/up/down, MoE experts (*_exps), embeddings, output."
	if len(others) > 0 {
		caption += " Other: " + strings.Join(others, ", ") + "."
	}
	return bars("role_bytes_read", "Device bytes read per tensor role", "tensor role", "MiB read", caption, roleGroups, vals, hover, colPrefill), why
}

// expertHeatmap: layer (y) × expert (x), decode activations or decode
// device bytes read.
func (r *run) expertHeatmap(ev *events, bytes bool) (*Chart, string) {
	layers, experts := []int{}, 0
	seen := map[int]bool{}
	for i := range r.st.Tensors {
		t := &r.st.Tensors[i]
		if !t.Pseudo() && t.Experts > 0 && t.Layer >= 0 {
			experts = max(experts, t.Experts)
			if !seen[t.Layer] {
				seen[t.Layer] = true
				layers = append(layers, t.Layer)
			}
		}
	}
	slices.Sort(layers)
	li := map[int]int{}
	for i, l := range layers {
		li[l] = i
	}
	val := grid(experts, len(layers))
	why := ""
	name, title, unit := "expert_activations", "Router picks per layer × expert (decode)", "activations"
	if bytes {
		name, title, unit = "expert_bytes_read", "Device bytes read per layer × expert (decode)", "MiB read"
		for k, v := range ev.expBytes {
			if i, ok := li[k[0]]; ok && k[1] < experts {
				val[k[1]][i] += v / (1 << 20)
			}
		}
	} else {
		var rows []map[string]stats.Value
		rows, why = r.table("expert_activations", "phase", "layer", "expert", "activations")
		for _, m := range rows {
			if m["phase"].S != "decode" {
				continue
			}
			if i, ok := li[int(m["layer"].I)]; ok && int(m["expert"].I) < experts {
				val[m["expert"].I][i] += fv(m["activations"])
			}
		}
	}
	// Layer i is drawn in row len-1-i, so that layer 0 is at the top.
	g := &gridXYZ{z: grid(experts, len(layers)), x0: -0.5, dx: 1, y0: -0.5, dy: 1}
	lo, hi := 0.0, 0.0
	for e, col := range val {
		for i, v := range col {
			hi = max(hi, v)
			g.z[e][len(layers)-1-i] = math.NaN()
			if v > 0 {
				g.z[e][len(layers)-1-i] = v
			}
		}
	}
	if hi == lo {
		hi = 1
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "expert"
	p.Y.Label.Text = "layer"
	cm := newHeatMap()
	cm.SetMin(lo)
	cm.SetMax(hi)
	hm := plotter.NewHeatMap(g, cm.Palette(256))
	hm.Min, hm.Max = lo, hi
	hm.NaN = colEmpty
	p.Add(hm)
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
		da := p.DataCanvas(main)
		tx, ty := p.Transforms(&da)
		var hs []Hover
		for e := range experts {
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
	return c, why
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
	type point struct {
		x, y float64
		text string
	}
	var pts []point
	realNote := ""
	for _, pol := range []string{"lru", "lfu", "belady"} {
		var xy plotter.XYs
		for _, m := range rows {
			if m["policy"].S != pol || m["k_experts"].NA != "" || m["hit_rate_ratio"].NA != "" {
				continue
			}
			k, h := float64(m["k_experts"].I), fv(m["hit_rate_ratio"])
			xy = append(xy, plotter.XY{X: k, Y: h})
			pts = append(pts, point{k, h, fmt.Sprintf("%s, K = %.0f: hit rate %.3f, after warm-up %s; %s read per decode token",
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
	var realLine *hline
	for _, m := range rows {
		if m["policy"].S != "real" {
			continue
		}
		if v := m["hit_rate_ratio"]; v.NA != "" {
			realNote = "the real hit rate is not marked: " + v.NA
		} else {
			realLine = &hline{y: v.F, label: fmt.Sprintf("real run: %.3f (picks whose expert was resident)", v.F)}
			p.Add(realLine)
		}
	}
	caption := "Share of the router's decode picks an expert cache of K experts per layer would have held: LRU, LFU and Belady's offline optimum (stats' cache_sim), beside the share the real run's page cache held (dashed)."
	if realNote != "" {
		caption += " The " + strings.TrimPrefix(realNote, "the ") + "."
	}
	c := &Chart{Name: "cache_hit_rate", Title: p.Title.Text, Caption: caption, W: 18 * vg.Centimeter, H: 11 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		da := p.DataCanvas(dc)
		tx, ty := p.Transforms(&da)
		var hs []Hover
		for _, q := range pts {
			x, y := tx(q.x), ty(q.y)
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: x - 5, Y: y - 5}, Max: vg.Point{X: x + 5, Y: y + 5}}, Text: q.text})
		}
		if realLine != nil {
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

// sweepChart: tokens/s, or device bytes read per decode token, against
// the memory budget of each run of a sweep.
func sweepChart(s *sweep.Summary, perToken bool) (*Chart, string) {
	name, title, ylab := "sweep_tokens_per_s", "Decode tokens/s against the memory budget", "tokens/s"
	if perToken {
		name, title, ylab = "sweep_bytes_per_token", "Device bytes read per decode token against the memory budget", "MiB read per token"
	}
	type point struct {
		x, y float64
		text string
	}
	var pts []point
	var failed []string
	rows := slices.Clone(s.Rows)
	slices.SortStableFunc(rows, func(a, b sweep.Row) int { return cmp.Compare(a.MemLimit, b.MemLimit) })
	for _, row := range rows {
		v := row.TokensPerS
		if perToken {
			v = row.BytesPerToken
		}
		switch {
		case row.Status != sweep.StatusOK:
			failed = append(failed, row.Budget+": "+row.Status)
		case v == nil:
			key := "tokens_per_s"
			if perToken {
				key = "bytes_read_per_token"
			}
			failed = append(failed, row.Budget+": "+row.NA[key])
		default:
			y := *v
			if perToken {
				y /= 1 << 20
			}
			pts = append(pts, point{float64(row.MemLimit) / (1 << 20), y, fmt.Sprintf("%s: %.4g %s (%d decode tokens, %s read)", row.Budget, y, ylab, row.Decode, units.Bytes(float64(row.ReadBytes)))})
		}
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "memory budget (MiB, cgroup limit)"
	p.X.Tick.Marker = tokenTicks{} // whole MiB
	p.Y.Label.Text = ylab
	p.Y.Min = 0
	var xy plotter.XYs
	for _, q := range pts {
		xy = append(xy, plotter.XY{X: q.x, Y: q.y})
	}
	if len(xy) > 0 {
		if l, sc, err := plotter.NewLinePoints(xy); err == nil {
			l.Color, sc.Color = colDecode, colDecode
			sc.Shape = draw.CircleGlyph{}
			p.Add(l, sc)
		}
	}
	caption := fmt.Sprintf("%s, one recorded run per budget (%s).", title, shellJoin(s.Command))
	if len(failed) > 0 {
		caption += " Not drawn: " + strings.Join(failed, "; ") + "."
	}
	c := &Chart{Name: name, Title: title, Caption: caption, W: 16 * vg.Centimeter, H: 10 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		da := p.DataCanvas(dc)
		tx, ty := p.Transforms(&da)
		var hs []Hover
		for _, q := range pts {
			x, y := tx(q.x), ty(q.y)
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: x - 5, Y: y - 5}, Max: vg.Point{X: x + 5, Y: y + 5}}, Text: q.text})
		}
		return hs
	}
	return c, ""
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
