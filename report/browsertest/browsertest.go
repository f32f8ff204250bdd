// Package browsertest opens an HTML file in a real headless Chromium, as
// a person would open it from disk, and reports what the browser saw:
// console errors, uncaught exceptions, blocked or failed loads, the
// rendered size of every chart, and a screenshot. It speaks the Chrome
// DevTools protocol over --remote-debugging-pipe (JSON messages ended by
// a NUL byte, commands on fd 3, replies and events on fd 4), so it needs
// nothing but the chromium binary. For tests.
package browsertest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
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

// Open loads the file at path in a fresh headless Chromium and reports
// what it saw once the page's load event has fired.
func Open(ctx context.Context, path string, o Options) (*Page, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if o.Width == 0 {
		o.Width, o.Height = 1280, 1024
	}
	profile, err := os.MkdirTemp("", "browsertest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(profile)
	toBrowser, cmdIn, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmdOut, fromBrowser, err := os.Pipe()
	if err != nil {
		toBrowser.Close()
		cmdIn.Close()
		return nil, err
	}
	var stderr bytes.Buffer
	cmd := exec.Command(Binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
		"--disable-extensions", "--no-first-run", "--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
		"--user-data-dir="+profile, fmt.Sprintf("--window-size=%d,%d", o.Width, o.Height),
		"--remote-debugging-pipe", "about:blank")
	cmd.ExtraFiles = []*os.File{toBrowser, fromBrowser} // fd 3, fd 4
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", Binary, err)
	}
	toBrowser.Close()
	fromBrowser.Close()
	c := &conn{w: cmdIn, pending: map[int]chan reply{}, events: make(chan event, 1024), done: make(chan struct{})}
	go c.readLoop(cmdOut)
	defer func() {
		close(c.done)
		cmdIn.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		cmdOut.Close()
	}()
	p, err := c.run(ctx, "file://"+abs, o)
	if err != nil {
		return nil, fmt.Errorf("%w (chromium said: %s)", err, lastLines(stderr.String(), 5))
	}
	c.call(ctx, "", "Browser.close", nil, nil)
	return p, nil
}

type reply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

type event struct {
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	SessionID string          `json:"sessionId"`
}

type conn struct {
	mu      sync.Mutex
	w       io.Writer
	id      int
	pending map[int]chan reply
	events  chan event
	readErr error
	done    chan struct{} // closed when Open returns: events are no longer read
}

func (c *conn) readLoop(r io.Reader) {
	br := bufio.NewReader(r)
	for {
		msg, err := br.ReadBytes(0)
		if err != nil {
			c.mu.Lock()
			c.readErr = fmt.Errorf("reading from the browser: %w", err)
			for _, ch := range c.pending {
				close(ch)
			}
			c.pending = map[int]chan reply{}
			c.mu.Unlock()
			close(c.events)
			return
		}
		msg = msg[:len(msg)-1]
		var m struct {
			ID *int `json:"id"`
			reply
			event
		}
		if err := json.Unmarshal(msg, &m); err != nil {
			continue
		}
		if m.ID != nil {
			c.mu.Lock()
			ch := c.pending[*m.ID]
			delete(c.pending, *m.ID)
			c.mu.Unlock()
			if ch != nil {
				ch <- m.reply
			}
			continue
		}
		select {
		case c.events <- m.event:
		case <-c.done:
		}
	}
}

// call sends a command and waits for its reply, decoding its result into
// out (when not nil).
func (c *conn) call(ctx context.Context, session, method string, params, out any) error {
	c.mu.Lock()
	if c.readErr != nil {
		c.mu.Unlock()
		return c.readErr
	}
	c.id++
	id := c.id
	ch := make(chan reply, 1)
	c.pending[id] = ch
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	b, err := json.Marshal(msg)
	if err == nil {
		_, err = c.w.Write(append(b, 0))
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	select {
	case <-ctx.Done():
		return fmt.Errorf("%s: %w", method, ctx.Err())
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("%s: the browser went away", method)
		}
		if r.Error != nil {
			return fmt.Errorf("%s: %s (%d)", method, r.Error.Message, r.Error.Code)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
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
  return JSON.stringify(out);
})()`

func (c *conn) run(ctx context.Context, url string, o Options) (*Page, error) {
	var target struct {
		TargetID string `json:"targetId"`
	}
	if err := c.call(ctx, "", "Target.createTarget", map[string]any{"url": "about:blank"}, &target); err != nil {
		return nil, err
	}
	var att struct {
		SessionID string `json:"sessionId"`
	}
	if err := c.call(ctx, "", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &att); err != nil {
		return nil, err
	}
	s := att.SessionID
	for _, m := range []string{"Runtime.enable", "Log.enable", "Page.enable"} {
		if err := c.call(ctx, s, m, nil, nil); err != nil {
			return nil, err
		}
	}
	if err := c.call(ctx, s, "Emulation.setDeviceMetricsOverride", map[string]any{
		"width": o.Width, "height": o.Height, "deviceScaleFactor": 1, "mobile": false}, nil); err != nil {
		return nil, err
	}
	p := &Page{}
	var nav struct {
		ErrorText string `json:"errorText"`
	}
	if err := c.call(ctx, s, "Page.navigate", map[string]any{"url": url}, &nav); err != nil {
		return nil, err
	}
	if nav.ErrorText != "" {
		return nil, fmt.Errorf("navigating to %s: %s", url, nav.ErrorText)
	}
	// Events arrive on their own channel; collect errors until the load
	// event, then let the remaining ones in while measuring.
	loaded := false
	collect := func(e event) {
		if e.SessionID != s {
			return
		}
		switch e.Method {
		case "Page.loadEventFired":
			loaded = true
		case "Runtime.exceptionThrown":
			var x struct {
				ExceptionDetails struct {
					Text      string `json:"text"`
					Exception struct {
						Description string `json:"description"`
					} `json:"exception"`
				} `json:"exceptionDetails"`
			}
			json.Unmarshal(e.Params, &x)
			p.Errors = append(p.Errors, "uncaught exception: "+x.ExceptionDetails.Text+" "+x.ExceptionDetails.Exception.Description)
		case "Runtime.consoleAPICalled":
			var x struct {
				Type string `json:"type"`
				Args []struct {
					Value       any    `json:"value"`
					Description string `json:"description"`
				} `json:"args"`
			}
			json.Unmarshal(e.Params, &x)
			if x.Type == "error" || x.Type == "assert" {
				msg := "console." + x.Type + ":"
				for _, a := range x.Args {
					msg += fmt.Sprintf(" %v%s", a.Value, a.Description)
				}
				p.Errors = append(p.Errors, msg)
			}
		case "Log.entryAdded":
			var x struct {
				Entry struct {
					Source, Level, Text, URL string
				} `json:"entry"`
			}
			json.Unmarshal(e.Params, &x)
			if x.Entry.Level == "error" {
				p.Errors = append(p.Errors, fmt.Sprintf("%s error: %s %s", x.Entry.Source, x.Entry.Text, x.Entry.URL))
			}
		}
	}
	for !loaded {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the page to load: %w", ctx.Err())
		case e, ok := <-c.events:
			if !ok {
				return nil, errors.New("the browser went away before the page loaded")
			}
			collect(e)
		}
	}
	var ev struct {
		Result struct {
			Value string `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text string `json:"text"`
		} `json:"exceptionDetails"`
	}
	if err := c.call(ctx, s, "Runtime.evaluate", map[string]any{"expression": chartsScript, "awaitPromise": true, "returnByValue": true}, &ev); err != nil {
		return nil, err
	}
	if ev.ExceptionDetails != nil {
		return nil, fmt.Errorf("measuring the charts: %s", ev.ExceptionDetails.Text)
	}
	if err := json.Unmarshal([]byte(ev.Result.Value), &p.Charts); err != nil {
		return nil, fmt.Errorf("measuring the charts: %w", err)
	}
	shot := map[string]any{"format": "png"}
	if o.Full {
		var lm struct {
			CSSContentSize struct {
				Width, Height float64
			} `json:"cssContentSize"`
		}
		if err := c.call(ctx, s, "Page.getLayoutMetrics", nil, &lm); err != nil {
			return nil, err
		}
		shot["captureBeyondViewport"] = true
		shot["clip"] = map[string]any{"x": 0, "y": 0, "width": lm.CSSContentSize.Width, "height": lm.CSSContentSize.Height, "scale": 1}
	}
	var img struct {
		Data string `json:"data"`
	}
	if err := c.call(ctx, s, "Page.captureScreenshot", shot, &img); err != nil {
		return nil, err
	}
	var err error
	if p.Screenshot, err = base64.StdEncoding.DecodeString(img.Data); err != nil {
		return nil, fmt.Errorf("screenshot: %w", err)
	}
	// Errors logged while measuring and drawing.
	for {
		select {
		case e, ok := <-c.events:
			if !ok {
				return p, nil
			}
			collect(e)
		default:
			return p, nil
		}
	}
}

func lastLines(s string, n int) string {
	lines := bytes.Split(bytes.TrimSpace([]byte(s)), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte(" | ")))
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
		if !slicesContains(want, c.Name) {
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

func slicesContains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}
