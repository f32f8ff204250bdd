package report

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/event"
)

// perTokenLine: bytes read (or fault stall) per token, prefill and
// decode drawn apart. Runs longer than LinePoints tokens are drawn as
// means of calls of one phase (tokenPoints).
func (r *run) perTokenLine(stall bool) (*Chart, string) {
	name, title, ylab := "token_bytes_read", "Device bytes read per token", "MiB read"
	val := func(t *event.TokenInfo) float64 { return float64(t.ReadBytes) / (1 << 20) }
	if stall {
		name, title, ylab = "token_stall", "Fault stall per token", "stall (ms, summed over threads)"
		val = func(t *event.TokenInfo) float64 { return float64(t.StallNS) / 1e6 }
	}
	group := pointGroup(r.tokens, LinePoints)
	pts := tokenPoints(r.tokens, group, val)
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
	if firstDecode := phaseLines(p, pts); firstDecode >= 0 {
		p.Add(&vline{x: firstDecode - 0.5, label: "decode starts"})
	}
	caption := fmt.Sprintf("%s, %d llama_decode calls; prefill in red, decode in blue, the dashed line where decode starts.", title, len(r.tokens))
	caption += groupNote(group)
	if stall {
		caption += " Stall is the fault latency summed over the faulting threads (as stats' fault_stall_per_token)."
	}
	hovers := make([]hoverPoint, len(pts))
	for i, q := range pts {
		hovers[i] = hoverPoint{q.x, q.y, q.hoverText(stall)}
	}
	c := &Chart{Name: name, Title: title, Caption: caption, W: 22 * vg.Centimeter, H: 9 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		return pointHovers(p, dc, hovers, 4)
	}
	if len(r.tokens) == 0 {
		return c, "no llama_decode call was recorded: the per-token charts are empty"
	}
	return c, ""
}

// tokenPoint is one point of a per-token line: the mean of n calls of
// one phase, consecutive among that phase's calls.
type tokenPoint struct {
	x, y  float64
	n     int
	first uint32
	last  uint32
	phase uint8
	ntoks int32
}

// pointGroup is how many calls a point of a per-token line means for the
// line to have at most budget points: each phase's calls are grouped
// apart, so each phase may leave one group short.
func pointGroup(tokens []event.TokenInfo, budget int) int {
	phases := map[uint8]bool{}
	for _, t := range tokens {
		phases[t.Phase] = true
	}
	room := max(1, budget-len(phases))
	return max(1, (len(tokens)+room-1)/room)
}

// groupNote is a per-token line caption's sentence on its points' groups,
// "" where each point is one call.
func groupNote(group int) string {
	if group <= 1 {
		return ""
	}
	return fmt.Sprintf(" Each point is the mean of up to %d calls of one phase, consecutive among its calls.", group)
}

// tokenPoints averages val over groups of up to group calls of one phase,
// consecutive among that phase's calls: a server's run, whose prefills
// and decodes alternate thousands of times, has no more points than a
// run of one prompt. The points are in the order of their mean call.
func tokenPoints(tokens []event.TokenInfo, group int, val func(*event.TokenInfo) float64) []tokenPoint {
	var pts []tokenPoint
	open := map[uint8]int{} // phase → its point still taking calls
	for i := range tokens {
		t := &tokens[i]
		if j, ok := open[t.Phase]; ok && pts[j].n < group {
			q := &pts[j]
			q.x += float64(t.Token)
			q.y += val(t)
			q.n++
			q.last = t.Token
			q.ntoks += t.NTokens
			continue
		}
		open[t.Phase] = len(pts)
		pts = append(pts, tokenPoint{x: float64(t.Token), y: val(t), n: 1, first: t.Token, last: t.Token, phase: t.Phase, ntoks: t.NTokens})
	}
	for i := range pts {
		pts[i].x /= float64(pts[i].n)
		pts[i].y /= float64(pts[i].n)
	}
	slices.SortStableFunc(pts, func(a, b tokenPoint) int { return cmp.Compare(a.x, b.x) })
	return pts
}

func (q *tokenPoint) hoverText(stall bool) string {
	what := fmt.Sprintf("token %d", q.first)
	if q.n > 1 {
		what = fmt.Sprintf("tokens %d–%d (mean of %d)", q.first, q.last, q.n)
	}
	v := fmt.Sprintf("%.3g MiB read", q.y)
	if stall {
		v = fmt.Sprintf("%.3g ms stalled", q.y)
	}
	return fmt.Sprintf("%s, %s (%d tokens in the batch): %s", what, event.PhaseName(q.phase), q.ntoks, v)
}

// phaseLines draws the prefill and the decode points as two lines and
// gives the first decode token, -1 when there is none.
func phaseLines(p *plot.Plot, pts []tokenPoint) float64 {
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
		addLine(p, xy, ph.name, ph.col, vg.Points(2.5), len(pts) > 60)
	}
	return firstDecode
}

// addLine draws xy as a line with a point at each, of colour col, in the
// legend as name; dense lines get dots, not beads.
func addLine(p *plot.Plot, xy plotter.XYs, name string, col color.Color, radius vg.Length, dense bool) {
	if len(xy) == 0 {
		return
	}
	l, s, err := plotter.NewLinePoints(xy)
	if err != nil {
		return
	}
	l.Color, s.Color = col, col
	s.Shape = draw.CircleGlyph{}
	s.Radius = radius
	if dense {
		s.Radius = vg.Points(1)
	}
	p.Add(l, s)
	p.Legend.Add(name, l, s)
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
