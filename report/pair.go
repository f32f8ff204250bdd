package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
	"strings"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
)

// Two runs side by side: `iocorr report A B`. The page has the two runs'
// headers in two columns, charts comparing them (package diff's figures:
// per phase, layer and expert, A's bar beside B's), each run's own charts
// side by side, and package diff's tables. A figure one run has not (a
// layer its model lacks, a counter it did not measure) is NA with the
// reason on hover, never a bar of zero.

// PairRun is one run of a two-run report: its store, metadata and stats
// (stats.Compute over them), and its directory to name it.
type PairRun struct {
	Run   *store.Run
	Stats *stats.Report
}

// Pair is the report of two runs, ready to be written as HTML or PNGs.
type Pair struct {
	Title  string
	Status string // both runs' status, "" when both are complete
	// A and B are each run's own report: header, notes, charts.
	A, B *Report
	// Charts compare the runs (PairChartNames' diff_* charts).
	Charts []*Chart
	// Sides are each run's charts, A's and B's of one name in a row.
	Sides  []Side
	Tables []*diffTable
	// OnlyA and OnlyB name the tensors only one run's models have.
	OnlyA, OnlyB []string
}

// Side is one row of the side-by-side charts: a chart of run A and its
// counterpart of run B; nil where that run has no such chart (the other
// run's notes say why).
type Side struct {
	Name string
	A, B *Chart
}

// Colours of the two runs in comparison charts.
var (
	colA = color.RGBA{R: 120, G: 120, B: 120, A: 255}
	colB = color.RGBA{R: 230, G: 120, B: 20, A: 255}
)

// diffCharts are the comparison charts, in page order; expert is drawn
// when either run's model has experts.
var diffCharts = []struct {
	name, by, counter, title string
	moe                      bool
}{
	{"diff_phase_bytes_read", "phase", "bytes_read", "Device bytes read per phase", false},
	{"diff_phase_fault_stall", "phase", "fault_stall_ns", "Fault stall per phase", false},
	{"diff_layer_bytes_read", "layer", "bytes_read", "Device bytes read per layer", false},
	{"diff_expert_bytes_read", "expert", "bytes_read", "Device bytes read per expert (all MoE layers)", true},
}

// PairChartNames lists the charts of a two-run report: the comparison
// charts (the expert one when either model has experts), then run A's
// charts as a_NAME and run B's as b_NAME (ChartNames of each run).
func PairChartNames(moeA, moeB bool) []string {
	var n []string
	for _, c := range diffCharts {
		if !c.moe || moeA || moeB {
			n = append(n, c.name)
		}
	}
	for _, c := range ChartNames(moeA, false) {
		n = append(n, "a_"+c)
	}
	for _, c := range ChartNames(moeB, false) {
		n = append(n, "b_"+c)
	}
	return n
}

// diffTables are the tables of a two-run report: what is compared and by
// what, in page order.
var diffTables = []struct {
	name, title, by string
	counters        []string
	top             int
}{
	{"phases", "per phase", "phase", nil, 0},
	{"layers", "per layer", "layer", []string{"bytes_read", "major_faults", "fault_stall_ns", "block_requests"}, 0},
	{"tensors", "the 25 tensors whose device bytes read changed most", "tensor", []string{"bytes_read", "major_faults", "fault_stall_ns"}, 25},
}

// BuildPair draws both runs (Build of each) and compares them (diff.Compare).
func BuildPair(a, b PairRun) (*Pair, error) {
	ra, err := Build(a.Run, a.Stats, Options{RunDir: a.Run.Dir})
	if err != nil {
		return nil, fmt.Errorf("run A: %w", err)
	}
	rb, err := Build(b.Run, b.Stats, Options{RunDir: b.Run.Dir})
	if err != nil {
		return nil, fmt.Errorf("run B: %w", err)
	}
	p := &Pair{Title: "iocorr report of two runs", A: ra, B: rb}
	da, db := *a.Run, *b.Run
	moe := hasExperts(a.Run.Store) || hasExperts(b.Run.Store)
	for _, c := range diffCharts {
		if c.moe && !moe {
			continue
		}
		res, err := diff.Compare(da, db, diff.Options{By: c.by, Counters: []string{c.counter}})
		if err != nil {
			return nil, err
		}
		if p.Status == "" {
			p.Status, p.OnlyA, p.OnlyB = res.Status(), res.OnlyA, res.OnlyB
		}
		p.Charts = append(p.Charts, pairBars(c.name, c.title, c.by, res))
	}
	for _, t := range diffTables {
		o := diff.Options{By: t.by, Counters: t.counters, Top: t.top}
		if o.Counters == nil {
			o.Counters = diff.TableCounters(t.by)
		}
		if t.top > 0 {
			o.Sort = o.Counters[0]
		}
		res, err := diff.Compare(da, db, o)
		if err != nil {
			return nil, err
		}
		p.Tables = append(p.Tables, tableOfDiff(t.name, t.title, res))
	}
	p.Sides = sides(ra.Charts, rb.Charts)
	return p, nil
}

func hasExperts(st *store.Store) bool {
	for i := range st.Tensors {
		if t := &st.Tensors[i]; !t.Pseudo() && t.Experts > 0 {
			return true
		}
	}
	return false
}

// sides pairs the runs' charts by name, A's order first.
func sides(a, b []*Chart) []Side {
	var out []Side
	idx := map[string]int{}
	rename := func(c *Chart, run string) *Chart {
		cc := *c
		cc.Name = strings.ToLower(run) + "_" + c.Name
		cc.Title = "Run " + run + ": " + c.Title
		return &cc
	}
	for _, c := range a {
		idx[c.Name] = len(out)
		out = append(out, Side{Name: c.Name, A: rename(c, "A")})
	}
	for _, c := range b {
		if i, ok := idx[c.Name]; ok {
			out[i].B = rename(c, "B")
			continue
		}
		out = append(out, Side{Name: c.Name, B: rename(c, "B")})
	}
	return out
}

// Every chart of the page: the comparisons, then each side's.
func (p *Pair) all() []*Chart {
	cs := append([]*Chart(nil), p.Charts...)
	for _, s := range p.Sides {
		for _, c := range []*Chart{s.A, s.B} {
			if c != nil {
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// WritePNGs writes every chart of the page as DIR/NAME.png.
func (p *Pair) WritePNGs(dir string) ([]string, error) {
	return (&Report{Charts: p.all()}).WritePNGs(dir)
}

// fmtUnit renders a counter's value by its unit.
func fmtUnit(v float64, u event.Unit) string {
	switch u {
	case event.UnitBytes:
		return units.Bytes(v)
	case event.UnitNS:
		return units.Duration(v)
	}
	return fmt.Sprintf("%.0f", v)
}

// fmtDelta renders a signed change by its unit.
func fmtDelta(d int64, u event.Unit) string {
	sign := "+"
	if d < 0 {
		sign = "-"
	} else if d == 0 {
		sign = ""
	}
	return sign + fmtUnit(math.Abs(float64(d)), u)
}

// cellText says a compared cell in one line, for hover text.
func cellText(c *diff.Cell) string {
	side := func(run string, s diff.Side) string {
		if s.NA != "" {
			return "run " + run + " NA (" + s.NA + ")"
		}
		return "run " + run + " " + fmtUnit(float64(s.V), c.Unit)
	}
	s := side("A", c.A) + ", " + side("B", c.B)
	switch {
	case c.DeltaNA != "":
	case c.RatioNA != "":
		s += fmt.Sprintf("; change %s, ratio NA (%s)", fmtDelta(c.Delta, c.Unit), c.RatioNA)
	default:
		s += fmt.Sprintf("; change %s, ratio B/A %.3g", fmtDelta(c.Delta, c.Unit), c.Ratio)
	}
	return s
}

// pairBars draws run A's and B's value of res's one counter per group as
// two bars side by side. A side that is NA has no bar; its label and
// hover say so.
func pairBars(name, title, by string, res *diff.Result) *Chart {
	var labels, hover []string
	va, vb := plotter.Values{}, plotter.Values{}
	unit := event.UnitCount
	scale, ylab := 1.0, res.Counters[0]
	if len(res.Groups) > 0 {
		unit = res.Groups[0].Cells[0].Unit
	}
	switch unit {
	case event.UnitBytes:
		scale, ylab = 1<<20, "MiB"
	case event.UnitNS:
		scale, ylab = 1e6, "ms"
	}
	var na []string
	for _, g := range res.Groups {
		if by == "expert" && g.Key == "-1" {
			continue // bytes of tensors without experts
		}
		c := &g.Cells[0]
		lab := g.Key
		if by == "layer" && g.Key == "-1" {
			lab = "none" // as the run's own layer chart names it
		}
		hover = append(hover, fmt.Sprintf("%s %s: %s", by, lab, cellText(c)))
		if g.In != diff.Both {
			lab += " (" + strings.ToUpper(g.In.String()) + ")"
		}
		labels = append(labels, lab)
		val := func(s diff.Side) float64 {
			if s.NA != "" {
				if !contains(na, s.NA) {
					na = append(na, s.NA)
				}
				return 0
			}
			return float64(s.V) / scale
		}
		va, vb = append(va, val(c.A)), append(vb, val(c.B))
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = by
	p.Y.Label.Text = ylab
	w := vg.Points(max(3, min(14, 210/float64(max(1, len(labels))))))
	if len(labels) > 0 {
		for i, vals := range []plotter.Values{va, vb} {
			bc, err := plotter.NewBarChart(vals, w)
			if err != nil {
				continue
			}
			bc.Color, bc.LineStyle.Width = []color.Color{colA, colB}[i], 0
			bc.Offset = w * vg.Length(2*i-1) / 2
			p.Add(bc)
			p.Legend.Add("run "+[]string{"A", "B"}[i], bc)
		}
		p.NominalX(labels...)
		p.Legend.Top = true
		// Half a group's room on each side, so the outer bars and
		// labels are inside the axes.
		p.X.Min, p.X.Max = -0.6, float64(len(labels))-0.4
		// Room above the tallest bar for the legend.
		if top := max(floats.Max(va), floats.Max(vb)); top > 0 {
			p.Y.Min, p.Y.Max = 0, top*1.2
		}
	}
	if len(labels) > 16 {
		p.X.Tick.Label.Rotation = math.Pi / 2
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	caption := fmt.Sprintf("%s of run A (grey) and run B (orange), side by side; hover a pair for both values, the change and the ratio B/A.", title)
	if len(na) > 0 {
		caption += " No bar where a run has no value (NA): " + strings.Join(na, "; ") + "."
	}
	c := &Chart{Name: name, Title: title + ": run A and run B", Caption: caption, W: 22 * vg.Centimeter, H: 10 * vg.Centimeter}
	c.draw = func(dc draw.Canvas, forPNG bool) []Hover {
		p.Draw(dc)
		da := p.DataCanvas(dc)
		tx, ty := p.Transforms(&da)
		var hs []Hover
		for i := range labels {
			x := tx(float64(i))
			top := max(ty(max(va[i], vb[i])), da.Min.Y+4)
			hs = append(hs, Hover{Rect: vg.Rectangle{Min: vg.Point{X: x - w, Y: da.Min.Y}, Max: vg.Point{X: x + w, Y: top}}, Text: hover[i]})
		}
		return hs
	}
	return c
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// diffTable is a comparison as an HTML table: a row per group, for each
// counter its value in A and B, the change and the ratio.
type diffTable struct {
	Name, Title string
	Columns     []string
	Rows        [][]pageCell
}

func tableOfDiff(name, title string, res *diff.Result) *diffTable {
	t := &diffTable{Name: name, Title: title, Columns: []string{res.By, "in"}}
	for _, c := range res.Counters {
		t.Columns = append(t.Columns, c+" A", c+" B", c+" change", c+" B/A")
	}
	for _, g := range res.Groups {
		row := []pageCell{{Text: g.Key}, {Text: g.In.String()}}
		for i := range g.Cells {
			c := &g.Cells[i]
			side := func(s diff.Side) pageCell {
				if s.NA != "" {
					return pageCell{Text: "NA", Why: s.NA}
				}
				return pageCell{Text: fmtUnit(float64(s.V), c.Unit), Num: true}
			}
			row = append(row, side(c.A), side(c.B))
			switch {
			case c.DeltaNA != "":
				row = append(row, pageCell{Text: "NA", Why: c.DeltaNA}, pageCell{Text: "NA", Why: c.DeltaNA})
				continue
			case c.RatioNA != "":
				row = append(row, pageCell{Text: fmtDelta(c.Delta, c.Unit), Num: true}, pageCell{Text: "NA", Why: c.RatioNA})
			default:
				row = append(row, pageCell{Text: fmtDelta(c.Delta, c.Unit), Num: true}, pageCell{Text: fmt.Sprintf("%.3g", c.Ratio), Num: true})
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

//go:embed pair.html.tmpl
var pairTemplate string

var pairPage = template.Must(template.New("pair").Parse(pairTemplate))

// WriteHTML writes the two-run page: one file, no script, no fetch, as
// Report.WriteHTML.
func (p *Pair) WriteHTML(w io.Writer) error {
	svg := func(c *Chart) (*pageChart, error) {
		if c == nil {
			return nil, nil
		}
		b, err := c.SVG()
		if err != nil {
			return nil, err
		}
		return &pageChart{c.Name, c.Title, c.Caption, template.HTML(b)}, nil
	}
	type pageSide struct {
		Name string
		A, B *pageChart
	}
	data := struct {
		*Pair
		Charts []pageChart
		Sides  []pageSide
		OnlyA  string
		OnlyB  string
	}{Pair: p, OnlyA: onlyLine(p.OnlyA), OnlyB: onlyLine(p.OnlyB)}
	for _, c := range p.Charts {
		pc, err := svg(c)
		if err != nil {
			return err
		}
		data.Charts = append(data.Charts, *pc)
	}
	for _, s := range p.Sides {
		a, err := svg(s.A)
		if err != nil {
			return err
		}
		b, err := svg(s.B)
		if err != nil {
			return err
		}
		data.Sides = append(data.Sides, pageSide{s.Name, a, b})
	}
	return pairPage.Execute(w, data)
}

// onlyLine lists tensor names, the first few, for the page.
func onlyLine(names []string) string {
	const show = 12
	if len(names) == 0 {
		return ""
	}
	s := fmt.Sprintf("%d tensors: %s", len(names), strings.Join(names[:min(show, len(names))], ", "))
	if len(names) > show {
		s += fmt.Sprintf(", … (%d more)", len(names)-show)
	}
	return s
}
