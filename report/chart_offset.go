package report

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/internal/units"
)

// offsetHeatmap: file offset (y) × token (x), coloured by device bytes
// read, or by major faults, on a log scale.
func (r *run) offsetHeatmap(ev *events, faults bool) (*Chart, string) {
	name, what, src := "offset_token_bytes", "device bytes read", ev.bytes
	if faults {
		name, what, src = "offset_token_faults", "major faults", ev.faults
	}
	g, total := offsetGrid(ev, src)
	lo, hi := g.minMax()
	lo = math.Floor(lo)
	hi = max(math.Ceil(hi), lo+1)
	bs := r.bands(ev.model)
	p := plot.New()
	p.Title.Text = fmt.Sprintf("File offset × token: %s", what)
	p.X.Label.Text = "token (llama_decode call; 0 = before the first)"
	p.Y.Label.Text = "model file offset"
	p.Y.Tick.Marker = offsetTicks(bs, ev.hi-ev.lo)
	p.Y.Min, p.Y.Max = g.y0, -float64(ev.lo)
	p.X.Min, p.X.Max = 0, float64(ev.maxTok+1)
	p.X.Tick.Marker = tokenTicks{}
	hm, cm := addHeatMap(p, g, lo, hi)
	hm.Rasterized = true
	cb := colourBar(cm, what)
	cb.Y.Tick.Marker = decadeTicks(!faults)

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
		return r.bandHovers(p, main, bs, ev)
	}
	note := ""
	if len(r.Meta.Models) > 1 {
		note = fmt.Sprintf("the offset heatmaps show %s only, of %d model files", r.modelName(ev.model), len(r.Meta.Models))
	}
	return c, note
}

// offsetGrid is the grid drawn of src (events' [col][row] cells): each
// value's log10, NaN for none. The offset axis is drawn negated so that
// the file's start is at the top (gonum's inverted scale does not apply
// to raster heatmaps). total is the sum of src.
func offsetGrid(ev *events, src [][]float64) (g *gridXYZ, total float64) {
	g = &gridXYZ{z: grid(ev.cols, ev.rows), x0: 0, dx: float64(ev.maxTok+1) / float64(ev.cols), y0: -float64(ev.lo) - float64(ev.rows)*float64(ev.rowBytes), dy: float64(ev.rowBytes)}
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
	return g, total
}

// decadeTicks labels a log10 colour bar with its powers of ten, in bytes
// when bytes.
func decadeTicks(bytes bool) plot.Ticker {
	return plot.TickerFunc(func(a, b float64) []plot.Tick {
		var t []plot.Tick
		for k := math.Ceil(a); k <= b; k++ {
			l := decimal(int(k))
			if bytes {
				l += "B"
			}
			t = append(t, plot.Tick{Value: k, Label: l})
		}
		return t
	})
}

// bandHovers gives each band of the offset axis, across the plot, its
// whole-run totals and its tensors' names.
func (r *run) bandHovers(p *plot.Plot, main draw.Canvas, bs []band, ev *events) []Hover {
	da := p.DataCanvas(main)
	_, ty := p.Transforms(&da)
	var hs []Hover
	for _, b := range bs {
		var by, fa float64
		names := []string{}
		for _, id := range b.ids {
			by += ev.tBytes[id]
			fa += ev.tFaults[id]
			names = append(names, r.Store.Tensors[id].Name)
		}
		y0, y1 := ty(-float64(b.lo)), ty(-float64(b.hi))
		hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: da.Min.X, Y: min(y0, y1)}, Max: vg.Point{X: da.Max.X, Y: max(y0, y1)}},
			Text: fmt.Sprintf("%s, offsets %d–%d (%s): %s read from the device, %.0f major faults over the run\n%s",
				b.label, b.lo, b.hi, units.Bytes(float64(b.hi-b.lo)), units.Bytes(by), fa, strings.Join(names, ", "))})
	}
	return hs
}

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
	for i := range r.Store.Tensors {
		if t := &r.Store.Tensors[i]; !t.Pseudo() && t.Model == model {
			ids = append(ids, t.ID)
		}
	}
	slices.SortFunc(ids, func(a, b uint32) int { return cmp.Compare(r.Store.Tensors[a].Offset, r.Store.Tensors[b].Offset) })
	for _, id := range ids {
		t := &r.Store.Tensors[id]
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

func fmtTotal(v float64, count bool) string {
	if count {
		return fmt.Sprintf("%.0f", v)
	}
	return units.Bytes(v)
}

func (r *run) modelName(m int) string {
	if m >= 0 && m < len(r.Meta.Models) {
		return r.Meta.Models[m].Path
	}
	return "no model file"
}
