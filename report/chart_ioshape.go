package report

import (
	"fmt"
	"image/color"
	"maps"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/stats"
)

var (
	colStall = color.RGBA{R: 230, G: 159, B: 0, A: 255}
	colWait  = color.RGBA{R: 86, G: 180, B: 233, A: 255}
)

// ioShapeLine: per token, the share of its llama_decode call the models'
// device was busy, the share it stalled on faults and the part of that it
// slept, with the phases' verdicts (stats' io_shape) in the caption. A token whose share is NA
// is not drawn, and the caption says why.
func (r *run) ioShapeLine() (*Chart, string) {
	const name, title = "io_shape", "I/O shape per token: device busy share, fault stall share and its wait"
	c := &Chart{Name: name, Title: title, W: 22 * vg.Centimeter, H: 9 * vg.Centimeter}
	rows, why := r.table(stats.IOShapeTokensTable, "token", "busy_share", "stall_share", "wait_share")
	phases, whyPhases := r.table(stats.IOShapeTable, "phase", "busy_share", "stall_share", "wait_share", "preempted_share", "bandwidth_share", "depth_gain", "verdict")
	if why == "" {
		why = whyPhases
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "token (llama_decode call)"
	p.X.Tick.Marker = tokenTicks{}
	p.Y.Label.Text = "share of the call"
	p.Y.Min, p.Y.Max = 0, 1.18 // the top sixth is left to the legend
	p.Legend.Top = true
	// Runs longer than LinePoints tokens are drawn as means of calls of
	// one phase, as the other per-token lines.
	byToken := map[int64]map[string]stats.Value{}
	for _, row := range rows {
		byToken[row["token"].I] = row
	}
	lines := []struct {
		col, label string
		colour     color.Color
	}{
		{"busy_share", "device busy (union of the models' read requests)", colDecode},
		{"stall_share", "fault stall (union of the faults in the models)", colStall},
		{"wait_share", "of it, asleep off the CPU (the faults' wait)", colWait},
	}
	// The lines share the chart's LinePoints.
	group := pointGroup(r.tokens, LinePoints/len(lines))
	var hovers []hoverPoint
	na := map[string]int{}
	for _, line := range lines {
		// A token whose figure is NA is left out of the line, counted.
		var toks []event.TokenInfo
		for _, t := range r.tokens {
			if v, ok := byToken[int64(t.Token)][line.col]; ok && v.NA == "" {
				toks = append(toks, t)
			} else if ok {
				na[v.NA]++
			}
		}
		pts := tokenPoints(toks, group, func(t *event.TokenInfo) float64 { return byToken[int64(t.Token)][line.col].F })
		var xy plotter.XYs
		for _, q := range pts {
			xy = append(xy, plotter.XY{X: q.x, Y: q.y})
			what := fmt.Sprintf("token %d", q.first)
			if q.n > 1 {
				what = fmt.Sprintf("tokens %d–%d (mean of %d)", q.first, q.last, q.n)
			}
			hovers = append(hovers, hoverPoint{q.x, q.y, fmt.Sprintf("%s, %s: %s %.3g", what, event.PhaseName(q.phase), line.col, q.y)})
		}
		addLine(p, xy, line.label, line.colour, vg.Points(2), len(xy) > 60)
	}
	var verdicts []string
	for _, ph := range phases {
		verdicts = append(verdicts, fmt.Sprintf("%s %s (stall share %s, of it wait %s and preempted %s, busy share %s, bandwidth share %s, depth gain %s)", ph["phase"].S, fmtText(ph["verdict"]),
			fmtVal(ph["stall_share"], "ratio"), fmtVal(ph["wait_share"], "ratio"), fmtVal(ph["preempted_share"], "ratio"), fmtVal(ph["busy_share"], "ratio"), fmtVal(ph["bandwidth_share"], "ratio"), fmtVal(ph["depth_gain"], "ratio")))
	}
	c.Caption = "Per llama_decode call, the share of its wall time the models' device had a read request in flight, the share a thread was inside a fault in a model file, and the part of that the faulting threads slept off the CPU (the rest is their time preempted there, in the verdicts below, and the kernel's work in the faults). " +
		"Verdicts: " + strings.Join(verdicts, "; ") + ". The rule: a wait share under 0.25 (the stall share where the waits were not timed) is compute-bound; else reads too few at a time for the disk (which served at least twice as much at a greater depth in `iocorr doctor --disk`: the depth gain) are latency-bound; else a device busy 0.8 of the time, or reads at 0.7 of the bandwidth the disk served at their depth, is bandwidth-bound; else latency-bound."
	c.Caption += groupNote(group)
	for _, reason := range slices.Sorted(maps.Keys(na)) {
		c.Caption += fmt.Sprintf(" %d figures not drawn, NA: %s.", na[reason], reason)
	}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		return pointHovers(p, dc, hovers, 4)
	}
	if why != "" {
		return c, why
	}
	if len(rows) == 0 {
		return c, "no llama_decode call was recorded: the I/O shape chart is empty"
	}
	return c, ""
}

// fmtText is a text figure, or NA with why.
func fmtText(v stats.Value) string {
	if v.NA != "" {
		return "NA (" + v.NA + ")"
	}
	return v.S
}
