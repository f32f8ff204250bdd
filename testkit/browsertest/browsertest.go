// Package browsertest opens an HTML file in a real headless Chromium, as
// a person would open it from disk, and reports what the browser saw:
// console errors, uncaught exceptions, blocked or failed loads, the
// rendered size of every chart, and a screenshot. chromedp drives the
// browser over the DevTools protocol. For tests.
package browsertest

import (
	"context"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
)

// Binary is the browser run: Debian's chromium.
var Binary = "chromium"

// Chart is one figure.chart of the page as rendered.
type Chart struct {
	Name string  `json:"name"`
	W    float64 `json:"w"` // CSS pixels of its <svg>
	H    float64 `json:"h"`
	// Images counts the <image> elements inside its SVG (heatmap
	// rasters), BrokenImages those that did not decode.
	Images       int `json:"images"`
	BrokenImages int `json:"broken"`
}

// Page is what the browser saw of a page.
type Page struct {
	// Errors are console errors, uncaught exceptions and log entries of
	// level error (failed loads, Content-Security-Policy violations).
	Errors []string
	Charts []Chart
	// Screenshot is a PNG of the page (the whole page when Options.Full).
	Screenshot []byte
}

// Options of Open.
type Options struct {
	Width, Height int  // the window, CSS pixels (default 1280 × 1024)
	Full          bool // screenshot the whole page, not the window
}

// Available reports why the browser cannot run here, or nil.
func Available() error {
	if _, err := exec.LookPath(Binary); err != nil {
		return fmt.Errorf("%s is not installed (Debian: apt-get install --no-install-recommends chromium; make setup does): %w", Binary, err)
	}
	return nil
}

// Require skips the test when the browser is missing, or fails it when
// the full suite runs (IOCORR_REQUIRE_LLAMA or IOCORR_REQUIRE_BROWSER
// set: make setup installs chromium).
func Require(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("IOCORR_REQUIRE_LLAMA") != "" || os.Getenv("IOCORR_REQUIRE_BROWSER") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// chartsScript measures every figure.chart's SVG and decodes each raster
// image inside it.
const chartsScript = `(async () => {
  const out = [];
  for (const f of document.querySelectorAll('figure.chart')) {
    const s = f.querySelector('svg');
    const r = s ? s.getBoundingClientRect() : {width: 0, height: 0};
    let images = 0, broken = 0;
    for (const im of (s ? s.querySelectorAll('image') : [])) {
      images++;
      const i = new Image();
      i.src = im.getAttribute('href') || im.getAttribute('xlink:href') || '';
      try { await i.decode(); if (!i.naturalWidth) broken++; } catch (e) { broken++; }
    }
    out.push({name: f.dataset.chart || '', w: r.width, h: r.height, images, broken});
  }
  return out;
})()`

// endMark is logged once everything is measured: the console's messages
// arrive in order, so every one the page logged before it has been read
// when it comes.
const endMark = "browsertest: end of page"

// Open loads the file at path in a fresh headless Chromium (its own
// temporary profile) and reports what it saw once the page's load event
// has fired.
func Open(ctx context.Context, path string, o Options) (*Page, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if o.Width == 0 {
		o.Width, o.Height = 1280, 1024
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(Binary),
		chromedp.Flag("headless", true),
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		// A screenshot shows the page only, as docs/report.png does.
		chromedp.Flag("hide-scrollbars", true),
		chromedp.WindowSize(o.Width, o.Height))
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	// Starts the browser, so that the console is read from the first
	// message of the page on.
	if err := chromedp.Do(bctx); err != nil {
		return nil, fmt.Errorf("starting %s: %w", Binary, err)
	}
	console := chromedp.Console(bctx)
	p := &Page{}
	if err := chromedp.Do(bctx,
		chromedp.EmulateViewport(int64(o.Width), int64(o.Height)),
		chromedp.Navigate("file://"+abs)); err != nil {
		return nil, fmt.Errorf("loading %s: %w", abs, err)
	}
	if p.Charts, err = chromedp.Run(bctx, chromedp.Evaluate[[]Chart](chartsScript, chromedp.EvalAwaitPromise)); err != nil {
		return nil, fmt.Errorf("measuring the charts: %w", err)
	}
	shot := chromedp.CaptureScreenshot()
	if o.Full {
		shot = chromedp.FullScreenshot(100) // 100: PNG
	}
	if p.Screenshot, err = chromedp.Run(bctx, shot); err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	if err := chromedp.Do(bctx, chromedp.Evaluate[chromedp.Void](fmt.Sprintf("console.debug(%q)", endMark))); err != nil {
		return nil, err
	}
	if p.Errors, err = errorsUntilEnd(console); err != nil {
		return nil, fmt.Errorf("reading the console: %w", err)
	}
	return p, nil
}

// errorsUntilEnd lists the console's errors, exceptions and error log
// entries (failed or blocked loads) up to endMark.
func errorsUntilEnd(console iter.Seq2[chromedp.ConsoleMessage, error]) ([]string, error) {
	var errs []string
	for m, err := range console {
		if err != nil {
			return errs, err
		}
		switch {
		case m.Type == chromedp.ConsoleDebug && m.Text == endMark:
			return errs, nil
		case m.IsException():
			errs = append(errs, "uncaught exception: "+m.Text)
		case m.Type == chromedp.ConsoleError && m.Source != "":
			errs = append(errs, fmt.Sprintf("%s error: %s %s", m.Source, m.Text, m.URL))
		case m.Type == chromedp.ConsoleError, m.Type == "assert":
			errs = append(errs, "console."+string(m.Type)+": "+m.Text)
		}
	}
	return errs, nil
}

// Check compares the charts the browser drew with the names wanted, in
// order, and lists every problem: a chart missing, one drawn at zero
// size, a raster image that does not decode, a chart not wanted.
func (p *Page) Check(want []string) []string {
	var probs []string
	got := map[string]*Chart{}
	for i := range p.Charts {
		c := &p.Charts[i]
		got[c.Name] = c
		if !slices.Contains(want, c.Name) {
			probs = append(probs, c.Name+": drawn but not expected")
		}
	}
	for _, n := range want {
		c := got[n]
		switch {
		case c == nil:
			probs = append(probs, n+": missing")
			continue
		case c.W <= 0 || c.H <= 0:
			probs = append(probs, fmt.Sprintf("%s: drawn at %g×%g", n, c.W, c.H))
		}
		if c.BrokenImages > 0 {
			probs = append(probs, fmt.Sprintf("%s: %d of %d raster images do not decode", n, c.BrokenImages, c.Images))
		}
	}
	return probs
}
