package report

import (
	"fmt"
	"image/color"
	"maps"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/internal/units"
)

// layerBars: device bytes read per layer, from stats' layers table.
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

// roleBars: device bytes read per group of tensor roles, from stats'
// tensors table.
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
