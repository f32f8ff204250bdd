package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html"
	"html/template"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/stats"
)

// Chart is one drawn figure.
type Chart struct {
	Name    string // its id in the page (chart-NAME) and its PNG's name
	Title   string
	Caption string
	W, H    vg.Length
	// draw draws the chart on c and returns its hover areas in c's
	// coordinates. forPNG asks for rasters as large as the picture, since
	// a PNG renderer smooths a small raster it scales up.
	draw func(c draw.Canvas, forPNG bool) []Hover
}

// Hover is an area of a chart with the text a browser shows over it.
type Hover struct {
	Rect vg.Rectangle
	Text string
}

// SVG draws the chart as an SVG element for inlining in HTML (no XML
// prolog), hover areas as transparent rectangles with <title>s.
func (c *Chart) SVG() ([]byte, error) {
	cv := vgsvg.New(c.W, c.H)
	hs := c.draw(draw.New(cv), false)
	var buf bytes.Buffer
	if _, err := cv.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("drawing %s: %w", c.Name, err)
	}
	s := buf.String()
	i := strings.Index(s, "<svg")
	end := strings.LastIndex(s, "</svg>")
	if i < 0 || end < i {
		return nil, fmt.Errorf("drawing %s: the SVG writer wrote no <svg> element", c.Name)
	}
	var out bytes.Buffer
	// The viewBox lets the page's CSS scale the drawing to its width.
	body := strings.Replace(s[i:end], "<svg ", fmt.Sprintf(`<svg class="chart-svg" role="img" aria-label="%s" `, html.EscapeString(c.Title)), 1)
	// A raster fills its cells' rectangle whatever its own aspect ratio.
	body = strings.ReplaceAll(body, "<image ", `<image preserveAspectRatio="none" `)
	out.WriteString(body)
	fmt.Fprintf(&out, "<title>%s</title>\n<g class=\"hover\" fill=\"#000\" fill-opacity=\"0\">\n", html.EscapeString(c.Title))
	h := c.H.Points()
	for _, hv := range hs {
		r := hv.Rect
		w, ht := (r.Max.X - r.Min.X).Points(), (r.Max.Y - r.Min.Y).Points()
		if w <= 0 || ht <= 0 || math.IsNaN(w) || math.IsNaN(ht) {
			continue
		}
		fmt.Fprintf(&out, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>%s</title></rect>\n",
			r.Min.X.Points(), h-r.Max.Y.Points(), w, ht, html.EscapeString(strings.ToValidUTF8(hv.Text, "\uFFFD")))
	}
	out.WriteString("</g>\n</svg>\n")
	return out.Bytes(), nil
}

// PNG writes the chart as a PNG at dpi.
func (c *Chart) PNG(w io.Writer, dpi int) error {
	cv := vgimg.NewWith(vgimg.UseWH(c.W, c.H), vgimg.UseDPI(dpi))
	c.draw(draw.New(cv), true)
	_, err := vgimg.PngCanvas{Canvas: cv}.WriteTo(w)
	return err
}

// WritePNGs writes every chart as DIR/NAME.png and returns the paths.
func (r *Report) WritePNGs(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, c := range r.Charts {
		p := filepath.Join(dir, c.Name+".png")
		f, err := os.Create(p)
		if err != nil {
			return paths, err
		}
		err = c.PNG(f, 150)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return paths, fmt.Errorf("writing %s: %w", p, err)
		}
		paths = append(paths, p)
	}
	return paths, nil
}

//go:embed report.html.tmpl
var pageTemplate string

var page = template.Must(template.New("report").Parse(pageTemplate))

type pageChart struct {
	Name, Title, Caption string
	SVG                  template.HTML
}

type pageCell struct {
	Text, Why string // Why: an NA's reason
	Num       bool
}

type pageTable struct {
	Name, Title string
	Columns     []string
	Rows        [][]pageCell
}

// WriteHTML writes the report as one HTML file: styles inline, charts as
// inline SVG (heatmaps as PNG data inside them), no script and no
// reference to anything outside the file; its Content-Security-Policy
// forbids the page any fetch.
func (r *Report) WriteHTML(w io.Writer) error {
	data := struct {
		*Report
		Charts []pageChart
		Tables []pageTable
	}{Report: r}
	for _, c := range r.Charts {
		svg, err := c.SVG()
		if err != nil {
			return err
		}
		data.Charts = append(data.Charts, pageChart{c.Name, c.Title, c.Caption, template.HTML(svg)})
	}
	for _, t := range r.Tables {
		data.Tables = append(data.Tables, htmlTable(t))
	}
	return page.Execute(w, data)
}

func htmlTable(t *stats.Table) pageTable {
	pt := pageTable{Name: t.Name, Title: t.Title}
	if len(t.Columns) > 8 && len(t.Rows) > 0 && len(t.Rows) <= 4 {
		// Many figures of a few rows (per phase) read better one figure
		// per line, as iocorr stats prints them.
		pt.Columns = []string{"figure"}
		for _, r := range t.Rows {
			pt.Columns = append(pt.Columns, cellOf(t.Columns[0], r[0]).Text)
		}
		for ci := 1; ci < len(t.Columns); ci++ {
			cells := []pageCell{{Text: t.Columns[ci].Name}}
			for _, r := range t.Rows {
				cells = append(cells, cellOf(t.Columns[ci], r[ci]))
			}
			pt.Rows = append(pt.Rows, cells)
		}
		return pt
	}
	for _, c := range t.Columns {
		pt.Columns = append(pt.Columns, c.Name)
	}
	for _, row := range t.Rows {
		cells := make([]pageCell, len(row))
		for i, v := range row {
			cells[i] = cellOf(t.Columns[i], v)
		}
		pt.Rows = append(pt.Rows, cells)
	}
	return pt
}

// cellOf renders a value by its column's unit suffix, as `stats` prints.
func cellOf(c stats.Column, v stats.Value) pageCell {
	switch {
	case v.NA != "":
		return pageCell{Text: "NA", Why: v.NA}
	case c.Kind == stats.String:
		return pageCell{Text: v.S}
	}
	x := float64(v.I)
	if c.Kind == stats.Float {
		x = v.F
	}
	switch {
	case strings.HasSuffix(c.Name, "_bytes") && x >= 0:
		return pageCell{Text: units.Bytes(x), Num: true}
	case strings.HasSuffix(c.Name, "_ns") && x >= 0:
		return pageCell{Text: units.Duration(x), Num: true}
	case c.Kind == stats.Int:
		return pageCell{Text: fmt.Sprint(v.I), Num: true}
	}
	return pageCell{Text: fmt.Sprintf("%.4g", x), Num: true}
}
