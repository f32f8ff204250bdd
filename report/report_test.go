package report_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/report"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/sweep"
	"github.com/iocorr/iocorr/testkit/browsertest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

const pg = kernel.PageSize

// synth describes a synthetic run: a model of layers × (attention,
// router, three *_exps tensors of experts slices of two pages) between
// token_embd and output, and tokens llama_decode calls (the first a
// prefill of four tokens). Each call reads and faults one page of one
// layer's attn_q and the two picked experts' ffn_down_exps slices.
type synth struct {
	layers, experts, tokens int
	dense                   bool // no *_exps tensors
	// serve, where not 0, makes every serve'th call a prefill, as a
	// server's run alternates them; else only the first call is one.
	serve int
}

func (s synth) build(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	mf := rundir.ModelFile{Path: "/models/synth.gguf", Dev: 1, Ino: 2}
	off := int64(pg)
	addT := func(name string, layer int, role string, size int64, experts int) {
		rt := rundir.Tensor{Name: name, Offset: off, Size: size, Layer: layer, Role: role}
		if experts > 0 {
			rt.Experts, rt.ExpertStride = experts, size/int64(experts)
		}
		mf.Tensors = append(mf.Tensors, rt)
		off += size
	}
	addT("token_embd.weight", -1, "token_embd", 8*pg, 0)
	for l := range s.layers {
		b := fmt.Sprintf("blk.%d.", l)
		addT(b+"attn_q.weight", l, "attn_q", 2*pg, 0)
		addT(b+"attn_k.weight", l, "attn_k", pg, 0)
		addT(b+"attn_v.weight", l, "attn_v", pg, 0)
		addT(b+"attn_output.weight", l, "attn_output", pg, 0)
		if s.dense {
			for _, r := range []string{"ffn_gate", "ffn_up", "ffn_down"} {
				addT(b+r+".weight", l, r, 4*pg, 0)
			}
			continue
		}
		addT(b+"ffn_gate_inp.weight", l, "ffn_gate_inp", pg, 0)
		for _, r := range []string{"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"} {
			addT(b+r+".weight", l, r, int64(s.experts)*2*pg, s.experts)
		}
	}
	addT("output_norm.weight", -1, "output_norm", pg, 0)
	addT("output.weight", -1, "output", 8*pg, 0)
	mf.Size, mf.Pages = off, off/pg
	meta := &rundir.Meta{Command: []string{"llama-cli", "-m", mf.Path, "-p", "it's a test"}, Models: []rundir.ModelFile{mf},
		Finished: true, Complete: true, ProbeSet: "graph",
		Probes: []rundir.Probe{{Kind: "uprobe", Target: "/lib/libllama.so", Symbol: "llama_decode"},
			{Kind: "uprobe", Target: "/lib/libggml-cpu.so", Symbol: "ggml_compute_forward_get_rows", Error: "symbol not found"},
			{Kind: "tracepoint", Target: rundir.TracepointPageAdd}},
		Controls: rundir.Controls{Cold: true, MemLimit: 96 << 20, CgroupVer: 1},
		Lost:     map[string]uint64{"fault": 0}, Counts: map[string]uint64{}}
	tensors := []event.Tensor{{ID: 0, Name: "[other file]", Model: -1, Layer: -1}, {ID: 1, Name: "[anonymous]", Model: -1, Layer: -1}, {ID: 2, Name: "[model header]", Model: -1, Layer: -1}}
	id := map[string]uint32{}
	for _, rt := range mf.Tensors {
		n := uint32(len(tensors))
		id[rt.Name] = n
		tensors = append(tensors, event.Tensor{ID: n, Name: rt.Name, Model: 0, Layer: rt.Layer, Role: rt.Role,
			Offset: rt.Offset, Size: rt.Size, Experts: rt.Experts, ExpertStride: rt.ExpertStride})
	}
	w := storetest.Begin(t, dir, tensors, 0)
	defer w.Close()
	res := &event.Result{Tensors: tensors, Ops: []string{""}}
	ts := uint64(1000)
	aggs := map[event.AggKey]*event.Counters{}
	emit := func(e event.Event, ti *event.TokenInfo) {
		e.Ts, e.Token, e.Phase, e.Trigger = ts, ti.Token, ti.Phase, event.NoTensor
		ts += 10
		k := event.AggKey{Token: ti.Token, Tensor: e.Tensor, Expert: e.Expert}
		if aggs[k] == nil {
			aggs[k] = &event.Counters{}
		}
		var c event.Counters
		switch e.Kind {
		case event.KindBlock:
			c.ReadBytes, c.BlockReqs = e.Bytes, 1
		case event.KindFault:
			c.Faults, c.Major, c.StallNS = 1, 1, e.Dur
		}
		ti.Add(&c)
		aggs[k].Add(&c)
		if err := w.Event(&e); err != nil {
			t.Fatal(err)
		}
	}
	// Before the first call: the load reads token_embd.
	load := &event.TokenInfo{Token: 0}
	emit(event.Event{Kind: event.KindBlock, Tensor: id["token_embd.weight"], Bytes: 8 * pg, Dur: 500, Expert: -1}, load)
	for i := 1; i <= s.tokens; i++ {
		ti := event.TokenInfo{Token: uint32(i), Phase: event.PhaseDecode, NTokens: 1, StartNS: ts}
		if i == 1 || s.serve > 0 && i%s.serve == 0 {
			ti.Phase, ti.NTokens = event.PhasePrefill, 4
		}
		l := i % s.layers
		q := id[fmt.Sprintf("blk.%d.attn_q.weight", l)]
		emit(event.Event{Kind: event.KindFault, Class: event.ClassMajor, Tensor: q, Offset: int64(i%2) * pg, Bytes: pg, Dur: 2000, Expert: -1}, &ti)
		emit(event.Event{Kind: event.KindBlock, Tensor: q, Offset: int64(i%2) * pg, Bytes: pg, Dur: 1500, Expert: -1}, &ti)
		if !s.dense {
			for layer := range s.layers {
				picks := []int{(i + layer) % s.experts, (3*i + layer + 1) % s.experts}
				if picks[0] == picks[1] {
					picks[1] = (picks[1] + 1) % s.experts
				}
				for _, e := range picks {
					res.Experts = append(res.Experts, event.ExpertSel{Token: ti.Token, Layer: uint16(layer), Expert: uint16(e), Count: 1})
				}
				if layer == l {
					d := id[fmt.Sprintf("blk.%d.ffn_down_exps.weight", l)]
					emit(event.Event{Kind: event.KindBlock, Tensor: d, Offset: int64(picks[0]) * 2 * pg, Bytes: 2 * pg, Dur: 1500, Expert: int16(picks[0])}, &ti)
				}
			}
		}
		ts += 100_000
		ti.EndNS = ts
		res.Tokens = append(res.Tokens, ti)
	}
	for k, c := range aggs {
		res.Aggs = append(res.Aggs, event.Agg{AggKey: k, Counters: *c})
	}
	slices.SortFunc(res.Aggs, func(a, b event.Agg) int {
		return cmp.Or(cmp.Compare(a.Token, b.Token), cmp.Compare(a.Tensor, b.Tensor), cmp.Compare(a.Expert, b.Expert))
	})
	if err := w.Commit(res, &store.Summary{Tokens: len(res.Tokens)}); err != nil {
		t.Fatal(err)
	}
	if err := rundir.WriteMeta(dir, meta); err != nil {
		t.Fatal(err)
	}
	return dir
}

// buildReport builds the report of the run in dir.
func buildReport(t testing.TB, dir string, opt report.Options) *report.Report {
	t.Helper()
	run := storetest.OpenRun(t, dir)
	sr, err := stats.Compute(run, stats.Options{})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.Build(run, sr, opt)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func html(t testing.TB, rep *report.Report) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := rep.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func names(rep *report.Report) []string {
	var n []string
	for _, c := range rep.Charts {
		n = append(n, c.Name)
	}
	return n
}

var sweepSummary = &sweep.Summary{Command: []string{"llama-cli", "-n", "8"}, Cold: true, Rows: []sweep.Row{
	{Budget: "64MiB", MemLimit: 64 << 20, Status: "killed by SIGKILL (OOM: 1 OOM kills in its memory cgroup)"},
	{Budget: "96MiB", MemLimit: 96 << 20, Status: sweep.StatusOK, Decode: 7, ReadBytes: 700 << 20, TokensPerS: ptr(2.5), UntracedTokensPerS: ptr(2.6), BytesPerToken: ptr(100 << 20)},
	{Budget: "128MiB", MemLimit: 128 << 20, Status: sweep.StatusOK, Decode: 7, ReadBytes: 70 << 20, TokensPerS: ptr(20), UntracedTokensPerS: ptr(21), BytesPerToken: ptr(10 << 20)},
}}

func ptr(v float64) *float64 { return &v }

func TestReportDrawsTheChartsOfItsKindOfRun(t *testing.T) {
	for _, c := range []struct {
		name  string
		run   synth
		sweep bool
		moe   bool
	}{
		{"moe", synth{layers: 4, experts: 8, tokens: 12}, false, true},
		{"moe with sweep", synth{layers: 4, experts: 8, tokens: 12}, true, true},
		{"dense", synth{layers: 3, tokens: 5, dense: true}, false, false},
		{"no llama_decode call", synth{layers: 2, experts: 4, tokens: 0}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := report.Options{}
			if c.sweep {
				opt.Sweep, opt.SweepDir = sweepSummary, "sweep-dir"
			}
			rep := buildReport(t, c.run.build(t), opt)
			if got, want := names(rep), report.ChartNames(c.moe, c.sweep); !slices.Equal(got, want) {
				t.Errorf("charts %q, want %q", got, want)
			}
			if !c.moe && !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "no MoE charts") }) {
				t.Errorf("a dense run's notes %q do not say why it has no MoE charts", rep.Notes)
			}
			for _, n := range rep.Notes {
				if strings.Contains(n, "iocorr stats") {
					t.Errorf("a chart lacks its figures: %s", n)
				}
			}
			if c.run.tokens == 0 && !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.Contains(n, "no llama_decode call was recorded") }) {
				t.Errorf("a run without calls: notes %q do not say its per-token charts are empty", rep.Notes)
			}
			page := string(html(t, rep))
			for _, want := range []string{
				`llama-cli -m /models/synth.gguf -p 'it'\''s a test'`, // the command, quoted as for a shell
				"ggml_compute_forward_get_rows: symbol not found",     // what could not be probed
				"memory limit 96.0 MiB",
				"lost events",
			} {
				if !strings.Contains(page, template(want)) {
					t.Errorf("the page lacks %q", want)
				}
			}
			if !strings.Contains(page, `id="table-per_token"`) {
				t.Errorf("the page lacks the per_token table")
			}
			if c.sweep && !strings.Contains(page, "64MiB: killed by SIGKILL") {
				t.Errorf("the sweep charts do not name the failed budget")
			}
			if c.sweep && !strings.Contains(page, `id="table-prediction"`) {
				t.Errorf("a sweep's page lacks the table of predicted against measured bytes")
			}
		})
	}
}

// template is how html/template writes s in text.
func template(s string) string {
	return strings.NewReplacer("'", "&#39;", `"`, "&#34;").Replace(s)
}

// TestHoverTextCarriesEachBarsFigures: every layer's bar has a <title>
// with the layer's bytes read, as stats' layers table has them.
func TestHoverTextCarriesEachBarsFigures(t *testing.T) {
	rep := buildReport(t, synth{layers: 4, experts: 8, tokens: 12}.build(t), report.Options{})
	svg := chartSVG(t, rep.Charts, "layer_bytes_read")
	// Token i reads one page of layer i%4's attn_q and two pages of one
	// of its experts; the load read token_embd (layer "none").
	for _, want := range []string{
		"<title>layer none: 32.0 KiB read from the device",
		"<title>layer 0: 36.0 KiB read from the device",
		"<title>layer 1: 36.0 KiB read from the device",
		"<title>layer 2: 36.0 KiB read from the device",
		"<title>layer 3: 36.0 KiB read from the device",
	} {
		if !strings.Contains(svg, want) {
			t.Errorf("layer chart lacks %q", want)
		}
	}
}

// rasters decodes every PNG inlined in the page and returns their sizes.
func rasters(t *testing.T, page []byte) [][2]int {
	re := regexp.MustCompile(`href="data:image/[a-z]+;base64,([A-Za-z0-9+/=]+)"`)
	var out [][2]int
	for _, m := range re.FindAllSubmatch(page, -1) {
		b, err := base64.StdEncoding.DecodeString(string(m[1]))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, [2]int{cfg.Width, cfg.Height})
	}
	return out
}

// TestReportSizeIsBoundedWhateverTheRunsLength: a run 100 times longer
// gives a report of the same bounded size: its offset heatmaps are
// rasters of HeatTokens × HeatRows cells at most, its per-token lines at
// most LinePoints points.
func TestReportSizeIsBoundedWhateverTheRunsLength(t *testing.T) {
	short := html(t, buildReport(t, synth{layers: 24, experts: 16, tokens: 200}.build(t), report.Options{}))
	rep := buildReport(t, synth{layers: 24, experts: 16, tokens: 20000}.build(t), report.Options{})
	long := html(t, rep)
	t.Logf("report of 200 tokens: %d bytes; of 20,000 tokens: %d bytes (bound %d)", len(short), len(long), report.MaxSize(24*8+3, 24, 16))
	heat := 0
	for _, r := range rasters(t, long) {
		if r[0] == 1 || r[1] == 1 {
			continue // a colour bar
		}
		heat++
		if r[0] != report.HeatTokens {
			t.Errorf("a heatmap of 20,001 token columns is %d columns wide, want %d", r[0], report.HeatTokens)
		}
		if r[1] > report.HeatRows {
			t.Errorf("a heatmap is %d rows high, above %d", r[1], report.HeatRows)
		}
	}
	if heat != 2 {
		t.Errorf("%d heatmap rasters in the page, want the 2 offset heatmaps", heat)
	}
	linePointsBounded(t, rep, "20,000 tokens")
	if len(long) > report.MaxSize(24*8+3, 24, 16) {
		t.Errorf("the long run's report is %d bytes, above the bound %d", len(long), report.MaxSize(24*8+3, 24, 16))
	}
}

// linePointsBounded checks that each per-token line chart of a long run
// has at most LinePoints points, and no fewer than half.
func linePointsBounded(t *testing.T, rep *report.Report, run string) {
	t.Helper()
	for _, c := range rep.Charts {
		if c.Name != "token_bytes_read" && c.Name != "token_stall" && c.Name != "io_shape" {
			continue
		}
		svg, err := c.SVG()
		if err != nil {
			t.Fatal(err)
		}
		// One hover area per point.
		if n := strings.Count(string(svg), "<rect"); n > report.LinePoints || n < report.LinePoints/2 {
			t.Errorf("%s: %d points for %s, want at most %d and no fewer than half", c.Name, n, run, report.LinePoints)
		}
	}
}

// A server's run, whose prefills and decodes alternate thousands of
// times, has per-token lines no longer than a run of one prompt: a point
// means calls of one phase, consecutive among that phase's calls.
func TestPerTokenLinesAreBoundedWhereThePhasesAlternate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		serve int
	}{
		{"a prefill every 4th call: 5,000 changes each way", 4},
		{"prefill and decode call by call", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := buildReport(t, synth{layers: 4, experts: 4, tokens: 20000, serve: tc.serve}.build(t), report.Options{})
			linePointsBounded(t, rep, fmt.Sprintf("20,000 tokens, a prefill every %d", tc.serve))
		})
	}
}

func TestPNGsAreWrittenOnePerChart(t *testing.T) {
	rep := buildReport(t, synth{layers: 2, experts: 4, tokens: 6}.build(t), report.Options{})
	dir := t.TempDir()
	paths, err := rep.WritePNGs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != len(rep.Charts) {
		t.Fatalf("%d PNGs for %d charts", len(paths), len(rep.Charts))
	}
	for i, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(f)
		f.Close()
		if err != nil || cfg.Width == 0 || cfg.Height == 0 || filepath.Base(p) != rep.Charts[i].Name+".png" {
			t.Errorf("%s: %v %dx%d", p, err, cfg.Width, cfg.Height)
		}
	}
}

func openInBrowser(t *testing.T, page []byte) *browsertest.Page {
	t.Helper()
	path := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(path, page, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	p, err := browsertest.Open(ctx, path, browsertest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReportOpensInChromiumWithEveryChartDrawn: the page of an MoE run
// with a sweep, opened from disk in headless Chromium, logs no error and
// draws every chart at a non-zero size, heatmap rasters decoded.
func TestReportOpensInChromiumWithEveryChartDrawn(t *testing.T) {
	browsertest.Require(t)
	page := html(t, buildReport(t, synth{layers: 4, experts: 8, tokens: 30}.build(t), report.Options{Sweep: sweepSummary}))
	p := openInBrowser(t, page)
	if len(p.Errors) > 0 {
		t.Errorf("the browser logged errors: %q", p.Errors)
	}
	if probs := p.Check(report.ChartNames(true, true)); len(probs) > 0 {
		t.Errorf("charts: %q", probs)
	}
	if _, err := png.DecodeConfig(bytes.NewReader(p.Screenshot)); err != nil {
		t.Errorf("screenshot: %v", err)
	}
}

// TestBrowserCheckFailsWhenAChartIsMissingOrBroken: the check the tests
// rely on notices a chart cut out of the page, a chart drawn at zero
// size, a heatmap whose raster does not decode, and a fetch the page's
// policy blocks.
func TestBrowserCheckFailsWhenAChartIsMissingOrBroken(t *testing.T) {
	browsertest.Require(t)
	page := string(html(t, buildReport(t, synth{layers: 2, experts: 4, tokens: 6}.build(t), report.Options{})))
	want := report.ChartNames(true, false)
	cut := regexp.MustCompile(`(?s)<figure class="chart" id="chart-token_stall".*?</figure>`)
	if !cut.MatchString(page) {
		t.Fatal("no token_stall figure to cut")
	}
	bad := cut.ReplaceAllString(page, "")
	bad = strings.Replace(bad, `<svg class="chart-svg"`, `<svg style="display:none" class="chart-svg"`, 1) // the first chart
	bad = regexp.MustCompile(`base64,[A-Za-z0-9+/]{8}`).ReplaceAllString(bad, "base64,AAAAAAAA")           // rasters damaged
	bad = strings.Replace(bad, "</body>", `<img src="http://example.invalid/x.png"></body>`, 1)
	p := openInBrowser(t, []byte(bad))
	probs := strings.Join(p.Check(want), "\n")
	for _, w := range []string{"token_stall: missing", "offset_token_bytes: drawn at 0×0", "offset_token_bytes: 2 of 2 raster images do not decode"} {
		if !strings.Contains(probs, w) {
			t.Errorf("the check did not say %q; it said:\n%s", w, probs)
		}
	}
	if !slices.ContainsFunc(p.Errors, func(e string) bool { return strings.Contains(e, "example.invalid") }) {
		t.Errorf("the blocked fetch was not reported: %q", p.Errors)
	}
}

// chartSVG draws the named chart of charts (a report's or a pair's).
func chartSVG(t *testing.T, charts []*report.Chart, name string) string {
	t.Helper()
	for _, c := range charts {
		if c.Name == name {
			b, err := c.SVG()
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
	}
	t.Fatalf("no chart %s", name)
	return ""
}

// TestHeatmapHoverTotalsAreTheEventsOfEachBandAndCell: in the synthetic
// run token i reads one page of layer i%4's attn_q (with a major fault)
// and the two pages of one picked expert of that layer's ffn_down_exps;
// the load read token_embd's eight pages. Over 12 tokens each layer's
// band totals 3 × 3 pages and 3 faults, and each expert cell of the
// decode bytes heatmap holds two pages per token that read it.
func TestHeatmapHoverTotalsAreTheEventsOfEachBandAndCell(t *testing.T) {
	rep := buildReport(t, synth{layers: 4, experts: 8, tokens: 12}.build(t), report.Options{})
	svg := chartSVG(t, rep.Charts, "offset_token_bytes")
	for l := range 4 {
		if want := fmt.Sprintf("blk.%d, offsets", l); !strings.Contains(svg, want) {
			t.Errorf("no hover for %s", want)
		}
		re := regexp.MustCompile(fmt.Sprintf(`blk\.%d, offsets \d+–\d+ \([^)]*\): 36\.0 KiB read from the device, 3 major faults over the run`, l))
		if !re.MatchString(svg) {
			t.Errorf("layer %d's band does not total 36 KiB and 3 faults", l)
		}
	}
	if !strings.Contains(svg, "token_embd, offsets 4096–36864 (32.0 KiB): 32.0 KiB read from the device, 0 major faults") {
		t.Errorf("token_embd's band does not total the load's 32 KiB")
	}
	// Decode tokens 2…12: token i reads expert (i + i%4) % 8 of layer i%4.
	want := map[[2]int]int{}
	for i := 2; i <= 12; i++ {
		want[[2]int{i % 4, (i + i%4) % 8}] += 2 * pg
	}
	svg = chartSVG(t, rep.Charts, "expert_bytes_read")
	for l := range 4 {
		for e := range 8 {
			text := fmt.Sprintf("layer %d, expert %d: %s read (decode)", l, e, kib(want[[2]int{l, e}]))
			if !strings.Contains(svg, text) {
				t.Errorf("no cell says %q", text)
			}
		}
	}
}

func kib(n int) string {
	if n == 0 {
		return "0 B"
	}
	return fmt.Sprintf("%d.0 KiB", n>>10)
}

// TestPageReferencesNothingOutsideItself: every src and href of the page
// is inline data or a link inside the page, and its policy forbids any
// fetch, so that it opens from disk with no network.
func TestPageReferencesNothingOutsideItself(t *testing.T) {
	page := string(html(t, buildReport(t, synth{layers: 2, experts: 4, tokens: 6}.build(t), report.Options{Sweep: sweepSummary})))
	refs := regexp.MustCompile(`(?:src|href)="([^"]*)"`).FindAllStringSubmatch(page, -1)
	if len(refs) == 0 {
		t.Fatal("no src or href at all: the heatmap rasters and the chart links are missing")
	}
	for _, m := range refs {
		if !strings.HasPrefix(m[1], "data:image/") && !strings.HasPrefix(m[1], "#") {
			t.Errorf("the page refers to %.80q", m[1])
		}
	}
	if !strings.Contains(page, `<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">`) {
		t.Error("the page has no policy forbidding fetches")
	}
	if strings.Contains(page, "<script") {
		t.Error("the page has a script")
	}
}
