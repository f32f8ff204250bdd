// Package report draws one recorded run (and, given one, a memory-budget
// sweep) as a single self-contained HTML file: the run's header, the
// tables of package stats, and charts drawn with gonum.org/v1/plot and
// inlined as SVG, so that the file opens from disk with no network.
//
// Every chart is aggregated before it is drawn, so the file's size is
// bounded by the model (its tensors, layers and experts), never by the
// run's length: at most HeatTokens token columns × HeatRows offset rows
// per heatmap (a raster image inside the SVG), at most LinePoints points
// per line, one bar per layer or role, one cell per layer × expert.
package report

import (
	"cmp"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/sweep"
)

// The bounds that keep a report's size independent of the run's length.
const (
	HeatTokens = 240 // token columns of an offset × token heatmap
	HeatRows   = 256 // file-offset rows of an offset × token heatmap
	LinePoints = 480 // points of a per-token line
)

// Options are what a report shows besides the run.
type Options struct {
	// Sweep, when set, adds tokens/s and bytes per token against the
	// memory budget; SweepDir names it in the header.
	Sweep    *sweep.Summary
	SweepDir string
	// RunDir names the run in the header.
	RunDir string
	// Snapshots are the run's residency snapshots: the prediction of
	// other budgets (iocorr predict) takes its non-file memory from them.
	Snapshots []rundir.Snapshot
}

// Report is a run's report, ready to be written as HTML or PNGs.
type Report struct {
	Title  string
	Status string // the run's status line, "" when complete
	Header []Field
	Notes  []string // what the report could not show, and why
	Charts []*Chart
	Tables []*stats.Table
}

// Field is one line of the run header.
type Field struct {
	Name, Value string
}

// run is the recorded run and what Build gathers from it.
type run struct {
	*store.Run
	stats  *stats.Report
	tokens []event.TokenInfo
	moe    bool
}

// Build gathers the run's figures and draws its charts. rep is the run's
// stats (stats.Compute of the same run).
func Build(recorded *store.Run, rep *stats.Report, opt Options) (*Report, error) {
	st, meta := recorded.Store, recorded.Meta
	r := &run{Run: recorded, stats: rep}
	var err error
	if r.tokens, err = st.Tokens(); err != nil {
		return nil, fmt.Errorf("reading tokens: %w", err)
	}
	slices.SortFunc(r.tokens, func(a, b event.TokenInfo) int { return cmp.Compare(a.Token, b.Token) })
	for i := range st.Tensors {
		if t := &st.Tensors[i]; !t.Pseudo() && t.Experts > 0 {
			r.moe = true
		}
	}
	out := &Report{Title: "iocorr report", Status: meta.Status(), Header: header(meta, opt)}
	ev, err := r.eventPass()
	if err != nil {
		return nil, err
	}
	add := func(c *Chart, note string) {
		if c != nil {
			out.Charts = append(out.Charts, c)
		}
		if note != "" {
			out.Notes = append(out.Notes, note)
		}
	}
	if ev.late > 0 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d events carry a token after the last llama_decode call the store has; the offset heatmaps leave them out", ev.late))
	}
	add(r.offsetHeatmap(ev, false))
	add(r.offsetHeatmap(ev, true))
	add(r.perTokenLine(false))
	add(r.perTokenLine(true))
	add(r.ioShapeLine())
	add(r.layerBars())
	add(r.roleBars())
	if r.moe {
		if why := meta.PicksNA(); why != "" {
			out.Notes = append(out.Notes, "router picks NA: "+why)
		} else if why := st.Summary.PicksNA(); why != "" {
			out.Notes = append(out.Notes, "router picks NA where not all seen (the decode heatmap leaves those layers grey): "+why)
		}
		add(r.expertHeatmap(ev, false))
		add(r.expertHeatmap(ev, true))
		add(r.cacheCurves())
	} else {
		out.Notes = append(out.Notes, "no MoE charts: the run's models have no *_exps tensors")
	}
	if opt.Sweep != nil {
		add(sweepChart(opt.Sweep, false))
		add(sweepChart(opt.Sweep, true))
	}
	for i := range rep.Tables {
		if t := &rep.Tables[i]; !t.Long {
			out.Tables = append(out.Tables, t)
		}
	}
	dt, note, err := DeviceTable(recorded)
	if err != nil {
		return nil, err
	}
	add(nil, note)
	if dt != nil {
		out.Tables = append(out.Tables, dt)
	}
	pc, pt, note := r.prediction(opt.Sweep, opt)
	add(pc, note)
	if pt != nil {
		out.Tables = append(out.Tables, pt)
	}
	return out, nil
}

// ChartNames lists the charts a report of a run has: the ones every run
// gets, the MoE ones when moe, the sweep ones when sweep. Tests check a
// rendered report against it.
func ChartNames(moe, sweep bool) []string {
	n := []string{"offset_token_bytes", "offset_token_faults", "token_bytes_read", "token_stall", "io_shape", "layer_bytes_read", "role_bytes_read"}
	if moe {
		n = append(n, "expert_activations", "expert_bytes_read", "cache_hit_rate")
	}
	if sweep {
		n = append(n, "sweep_tokens_per_s", "sweep_bytes_per_token", "sweep_predicted_bytes_per_token")
	}
	return n
}

func header(m *rundir.Meta, opt Options) []Field {
	var h headerFields
	if opt.RunDir != "" {
		h.add("run", "%s", opt.RunDir)
	}
	if opt.SweepDir != "" {
		h.add("sweep", "%s (the run below is one of its budgets)", opt.SweepDir)
	}
	h.add("command", "%s", units.ShellJoin(m.Command))
	switch {
	case m.Start.IsZero():
	case m.End.Before(m.Start):
		h.add("recorded", "from %s; the recording has no end time (it did not finish)", m.Start.UTC().Format("2006-01-02 15:04:05 MST"))
	default:
		h.add("recorded", "%s – %s (%s)", m.Start.UTC().Format("2006-01-02 15:04:05 MST"), m.End.UTC().Format("15:04:05"), m.End.Sub(m.Start).Round(1e6))
	}
	h.add("host", "%s, kernel %s, %s, %d CPUs, %s memory", m.Host.Hostname, m.Host.Kernel, m.Host.CPUModel, m.Host.NumCPU, units.Bytes(float64(m.Host.MemTotal)))
	for _, mf := range m.Models {
		h.add("model", "%s (%s, %d tensors; %d of %d pages resident before the run)", mf.Path, units.Bytes(float64(mf.Size)), len(mf.Tensors), mf.ResidentBefore, mf.Pages)
	}
	h.libraries(m.Libraries)
	h.probes(m)
	h.controls(&m.Controls)
	var lost uint64
	for _, n := range m.Lost {
		lost += n
	}
	h.add("lost events", "%d lost by the ring buffer (%s); %d block requests recorded without their completion (latency NA)", lost, sortedKV(m.Lost), m.BlockIncomplete)
	ch := &m.Child
	exit := fmt.Sprintf("exit status %d", ch.ExitCode)
	if ch.Signal != "" {
		exit = "killed by " + ch.Signal
	}
	h.add("child", "pid %d, %s; %d major and %d minor faults, max RSS %s (rusage)", ch.PID, exit, ch.MajFlt, ch.MinFlt, units.Bytes(float64(ch.MaxRSSKiB)*1024))
	for _, w := range m.Warnings {
		h.add("warning", "%s", w)
	}
	return h
}

// headerFields is the run header as it is built.
type headerFields []Field

func (h *headerFields) add(name, format string, a ...any) {
	*h = append(*h, Field{name, fmt.Sprintf(format, a...)})
}

// libraries lists the libraries by name in their directories, build ids
// cut to 12 digits (meta.json has them whole): a llama.cpp with its 15 CPU
// variants would fill a screen.
func (h *headerFields) libraries(ls []rundir.Library) {
	var dirs []string
	libs := map[string][]string{}
	for _, l := range ls {
		d, name := filepath.Split(l.Path)
		id := l.BuildID
		if len(id) > 12 {
			id = id[:12] + "…"
		}
		if id == "" {
			id = "no build id: " + l.BuildIDError
		}
		if libs[d] == nil {
			dirs = append(dirs, d)
		}
		libs[d] = append(libs[d], fmt.Sprintf("%s (%s)", name, id))
	}
	for _, d := range dirs {
		h.add("libraries", "%s: %s", d, strings.Join(libs[d], ", "))
	}
}

// probes counts the attached probes by kind and names each that failed.
func (h *headerFields) probes(m *rundir.Meta) {
	ok, failed := 0, []string{}
	kinds := map[string]uint64{}
	for _, p := range m.Probes {
		if p.Error != "" {
			failed = append(failed, fmt.Sprintf("%s %s %s: %s", p.Kind, p.Target, p.Symbol, p.Error))
		} else {
			ok++
			kinds[p.Kind]++
		}
	}
	h.add("probes", "probe set %s: %d attached (%s)", cmp.Or(m.ProbeSet, rundir.ProbeSetGraph), ok, sortedKV(kinds))
	for _, s := range failed {
		h.add("not probed", "%s", s)
	}
}

// controls says what the run was held to: its memory limit and cache.
func (h *headerFields) controls(c *rundir.Controls) {
	lim := "none"
	if c.MemLimit > 0 {
		lim = fmt.Sprintf("%s (cgroup v%d %s)", units.Bytes(float64(c.MemLimit)), c.CgroupVer, c.Cgroup)
	}
	h.add("limits", "memory limit %s; cold cache %v; drop caches %v", lim, c.Cold, c.DropCaches)
	if len(c.CgroupCounters) > 0 {
		h.add("cgroup counters", "%s", sortedKV(c.CgroupCounters))
	}
}

func sortedKV(m map[string]uint64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// MaxSize is the bound on a report's HTML size for a model of tensors
// tensors, layers layers and experts experts per MoE layer: a fixed part
// (the page, the header, the per-token lines of at most LinePoints
// points, the offset heatmaps' rasters of at most HeatTokens × HeatRows
// cells), a part per tensor (its table rows and hover text), per layer
// and per layer × expert cell. The run's length does not enter it.
func MaxSize(tensors, layers, experts int) int {
	return 600<<10 + 1024*tensors + 1024*layers + 400*layers*experts
}
