package report

import (
	"cmp"
	"fmt"
	"image/color"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/predict"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/sweep"
)

// colPredict colours a prediction's policies; Belady's as the expert
// caches' Belady.
var colPredict = map[string]color.Color{
	predict.PolicyKernel: colDecode,
	predict.PolicyPlan:   colPolicy["lru"],
	predict.PolicyBelady: colPolicy["belady"],
}

// predictBudgets are the budgets a report predicts: a sweep's, else the
// run's own limit and one and a half and twice it; none for a run without
// a limit.
func (r *run) predictBudgets(s *sweep.Summary) []int64 {
	var bs []int64
	if s != nil {
		for _, row := range s.Rows {
			bs = append(bs, row.MemLimit)
		}
	} else if l := r.Meta.Controls.MemLimit; l > 0 {
		bs = []int64{l, l * 3 / 2, l * 2}
	}
	slices.Sort(bs)
	return slices.Compact(bs)
}

// prediction is `iocorr predict` of the report's run at the budgets, as a
// table beside the measured decode bytes per token (the sweep's runs', or
// the run's own at its budget), and for a sweep a chart of both.
func (r *run) prediction(s *sweep.Summary, opt Options) (*Chart, *stats.Table, string) {
	budgets := r.predictBudgets(s)
	if len(budgets) == 0 {
		return nil, nil, "no prediction of other budgets: the run had no memory limit"
	}
	res, err := predict.Compute(r.Run, opt.Snapshots, predict.Options{Budgets: budgets})
	var why string
	if err != nil {
		why = err.Error()
	}
	measured := map[int64]*float64{}
	measuredWhy := map[int64]string{}
	if s != nil {
		for _, row := range s.Rows {
			measured[row.MemLimit] = row.BytesPerToken
			if row.BytesPerToken == nil {
				measuredWhy[row.MemLimit] = cmp.Or(row.NA["bytes_read_per_token"], row.Status)
			}
		}
	}
	var rows []predict.Row
	if res != nil {
		for _, row := range res.Rows {
			if row.Phase != "decode" {
				continue
			}
			if row.Policy == predict.PolicyRun {
				if _, ok := measured[row.BudgetBytes]; !ok && row.NA[predict.ColBytes] == "" {
					v := row.BytesReadPerToken
					measured[row.BudgetBytes] = &v
				}
				continue
			}
			rows = append(rows, row)
		}
	}
	t := &stats.Table{Name: "prediction", Title: "predicted decode bytes read per token (iocorr predict, from this run) against the measured ones, per budget and policy",
		Columns: []stats.Column{{Name: "budget_bytes", Kind: stats.Int}, {Name: "policy", Kind: stats.String}, {Name: "predicted_bytes_per_token", Kind: stats.Float},
			{Name: "measured_bytes_per_token", Kind: stats.Float}, {Name: "predicted_over_measured_ratio", Kind: stats.Float}}}
	for _, row := range rows {
		pv := stats.F64(row.BytesReadPerToken, "")
		if na := row.NA[predict.ColBytes]; na != "" {
			pv = stats.NA(na)
		}
		mv, ratio := stats.NA(cmp.Or(measuredWhy[row.BudgetBytes], "no run measured this budget")), stats.NA("no run measured this budget")
		if m := measured[row.BudgetBytes]; m != nil {
			mv = stats.F64(*m, "")
			ratio = stats.F64(row.BytesReadPerToken / *m, "the run read nothing at this budget")
			if pv.NA != "" {
				ratio = stats.NA(pv.NA)
			}
		}
		t.Rows = append(t.Rows, []stats.Value{stats.I64(row.BudgetBytes), stats.Str(policyLabel(row)), pv, mv, ratio})
	}
	if why != "" {
		t.Rows = append(t.Rows, []stats.Value{stats.NA(why), stats.Str(predict.PolicyKernel), stats.NA(why), stats.NA(why), stats.NA(why)})
	}
	if s == nil {
		return nil, t, ""
	}
	return predictChart(s, rows, measured, why), t, ""
}

// policyLabel names a predicted row's policy, and its readers' mode where
// it is the racing readers' (a run of two modes has a row of each).
func policyLabel(row predict.Row) string {
	if row.Mode == predict.ModeRace {
		return row.Policy + ", " + predict.ModeRace
	}
	return row.Policy
}

// predictChart draws each policy's predicted decode MiB per token and the
// sweep's measured ones against the budget.
func predictChart(s *sweep.Summary, rows []predict.Row, measured map[int64]*float64, why string) *Chart {
	const title = "Predicted (from one run) and measured device bytes per decode token against the memory budget"
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "memory budget (MiB, cgroup limit)"
	p.X.Tick.Marker = tokenTicks{}
	p.Y.Label.Text = "MiB read per token"
	p.Y.Min = 0
	var pts []hoverPoint
	byPolicy := map[string]plotter.XYs{}
	for _, row := range rows {
		if row.NA[predict.ColBytes] != "" {
			continue
		}
		x, y := float64(row.BudgetBytes)/(1<<20), row.BytesReadPerToken/(1<<20)
		label := policyLabel(row)
		byPolicy[label] = append(byPolicy[label], plotter.XY{X: x, Y: y})
		pts = append(pts, hoverPoint{x, y, fmt.Sprintf("%s at %.0f MiB: %.4g MiB per token predicted", label, x, y)})
	}
	for _, pol := range []string{predict.PolicyKernel, predict.PolicyPlan, predict.PolicyBelady} {
		for _, mode := range []string{"", predict.ModeRace} {
			label := policyLabel(predict.Row{Policy: pol, Mode: mode})
			if xy := byPolicy[label]; len(xy) > 0 {
				if l, err := plotter.NewLine(xy); err == nil {
					l.Color = colPredict[pol]
					l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
					if mode == predict.ModeRace {
						l.Dashes = []vg.Length{vg.Points(1), vg.Points(2)}
					}
					p.Add(l)
					p.Legend.Add(label+" (predicted)", l)
				}
			}
		}
	}
	var mxy plotter.XYs
	for b, v := range measured {
		if v != nil {
			mxy = append(mxy, plotter.XY{X: float64(b) / (1 << 20), Y: *v / (1 << 20)})
		}
	}
	slices.SortFunc(mxy, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	for _, q := range mxy {
		pts = append(pts, hoverPoint{q.X, q.Y, fmt.Sprintf("measured at %.0f MiB: %.4g MiB per token", q.X, q.Y)})
	}
	if len(mxy) > 0 {
		if sc, err := plotter.NewScatter(mxy); err == nil {
			sc.Color, sc.Shape = colReal, draw.CircleGlyph{}
			p.Add(sc)
			p.Legend.Add("measured", sc)
		}
	}
	p.Legend.Top = true
	caption := fmt.Sprintf("%s: the kernel's page cache as iocorr predict models it, Belady's bound, and each budget's recorded run (%s).", title, units.ShellJoin(s.Command))
	if why != "" {
		caption += " No prediction: " + strings.TrimSpace(why) + "."
	}
	c := &Chart{Name: "sweep_predicted_bytes_per_token", Title: title, Caption: caption, W: 16 * vg.Centimeter, H: 10 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		return pointHovers(p, dc, pts, 5)
	}
	return c
}
