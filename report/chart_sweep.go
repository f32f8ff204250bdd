package report

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/sweep"
)

// sweepChart: tokens/s of the untraced runs (the study's figure, not the
// tracer's), or device bytes read per decode token of the traced ones,
// against the memory budget of each run of a sweep.
func sweepChart(s *sweep.Summary, perToken bool) (*Chart, string) {
	name, title, ylab := "sweep_tokens_per_s", "Decode tokens/s (untraced runs) against the memory budget", "tokens/s"
	if perToken {
		name, title, ylab = "sweep_bytes_per_token", "Device bytes read per decode token against the memory budget", "MiB read per token"
	}
	pts, failed := sweepPoints(s, perToken, ylab)
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
	caption := fmt.Sprintf("%s, one recorded run per budget (%s).", title, units.ShellJoin(s.Command))
	if !perToken {
		caption = fmt.Sprintf("%s: the speed the command reported, run untraced under each budget right after its recorded run (%s).", title, units.ShellJoin(s.Command))
	}
	if len(failed) > 0 {
		caption += " Not drawn: " + strings.Join(failed, "; ") + "."
	}
	c := &Chart{Name: name, Title: title, Caption: caption, W: 16 * vg.Centimeter, H: 10 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		return pointHovers(p, dc, pts, 5)
	}
	return c, ""
}

// sweepPoints gives a point per budget whose run has the figure, by
// budget, in MiB, and says for each other budget why it has none.
func sweepPoints(s *sweep.Summary, perToken bool, ylab string) (pts []hoverPoint, failed []string) {
	rows := slices.Clone(s.Rows)
	slices.SortStableFunc(rows, func(a, b sweep.Row) int { return cmp.Compare(a.MemLimit, b.MemLimit) })
	for _, row := range rows {
		v, key := row.UntracedTokensPerS, "untraced_tokens_per_s"
		if perToken {
			v, key = row.BytesPerToken, "bytes_read_per_token"
		}
		switch {
		case row.Status != sweep.StatusOK:
			failed = append(failed, row.Budget+": "+row.Status)
		case v == nil:
			failed = append(failed, row.Budget+": "+row.NA[key])
		default:
			y := *v
			if perToken {
				y /= 1 << 20
			}
			pts = append(pts, hoverPoint{float64(row.MemLimit) / (1 << 20), y, fmt.Sprintf("%s: %.4g %s (%d decode tokens, %s read)", row.Budget, y, ylab, row.Decode, units.Bytes(float64(row.ReadBytes)))})
		}
	}
	return pts, failed
}
