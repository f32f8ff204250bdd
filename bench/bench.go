// Package bench measures what recording costs and how faithful it is, as
// issue 8 defines it: llama.cpp's llama-bench run untraced and under
// `iocorr record` side by side in the same rounds, a bpftrace floor on the
// same kernel tracepoints, the recorder's own CPU and memory, the store's
// ingest rate and query latency, and the recorded counts against the
// kernel's own. Every figure is a ratio or a count of one run of the
// benchmark, reported as median, min and max over its samples, or NA with
// the reason it could not be measured.
package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// Config is every knob of one benchmark run.
type Config struct {
	Iocorr     string `json:"iocorr"`      // the iocorr binary under test
	LlamaBench string `json:"llama_bench"` // llama.cpp's llama-bench
	Repo       string `json:"repo"`        // repository root: the Go benchmarks and tests run there
	WorkDir    string `json:"workdir"`     // model, run directories; kept for inspection
	Pairs      int    `json:"pairs"`       // interleaved untraced/traced rounds per arm
	Tokens     int    `json:"tokens"`      // llama-bench -n of the arms under the memory limit
	// RAMTokens is llama-bench -n of the arms in RAM: a run in RAM lasts
	// a fraction of a second at Tokens, too short to judge 2% on (issue
	// 18 asks for at least 128 tokens).
	RAMTokens int   `json:"ram_tokens"`
	Threads   int   `json:"threads"`   // llama-bench -t
	MemLimit  int64 `json:"mem_limit"` // bytes: the memory limit of arm (c)
	Short     bool  `json:"short"`     // prove it works: fewer rounds, the 1 M-event store
	Sched     bool  `json:"sched"`     // also arm (d), --probe sched
	// ScaleTokens are the run lengths of the scale section (llama-bench
	// -n), shortest first.
	ScaleTokens []int `json:"scale_tokens"`
	// Sections, when any, are the only sections run (Sections lists them).
	Sections []string `json:"sections,omitempty"`
	// Arms, when any, are the only overhead arms run: each names an arm
	// by its letter ("c") or its whole name ("c memlimit cold default").
	Arms []string `json:"arms,omitempty"`
	// A3BRun, when set, is a recorded a3b run directory the a3b section
	// measures the analysis commands on (its store rebuilt by the ingest
	// it times), instead of writing the model and recording one.
	A3BRun string `json:"a3b_run,omitempty"`
	// PrefetchCases, when any, are the only prefetch cases run: each is
	// matched against a case's name, in part ("slow", "qwen3moe").
	PrefetchCases []string  `json:"prefetch_cases,omitempty"`
	Log           io.Writer `json:"-"`
}

// runsArm says whether the overhead arm of that name runs.
func (c Config) runsArm(name string) bool {
	letter, _, _ := strings.Cut(name, " ")
	return len(c.Arms) == 0 || slices.Contains(c.Arms, letter) || slices.Contains(c.Arms, name)
}

// Sections are the benchmark's sections, in the order Run runs them.
var Sections = []string{"overhead", "scale", "sweep", "probes", "store", "toucher", "warden", "predict", "prefetch", "a3b"}

// OnDemand are the sections run only when asked for by name: a3b writes
// a 16 GiB model and its run reads hundreds of GiB.
var OnDemand = []string{"a3b"}

// runs says whether the section is to be run.
func (c Config) runs(section string) bool {
	if len(c.Sections) == 0 {
		return !slices.Contains(OnDemand, section)
	}
	return slices.Contains(c.Sections, section)
}

// Figure is one line of the table.
type Figure struct {
	Section string    `json:"section"`
	Name    string    `json:"name"`
	Unit    string    `json:"unit"`
	N       int       `json:"n"`
	Median  float64   `json:"median"`
	Min     float64   `json:"min"`
	Max     float64   `json:"max"`
	Samples []float64 `json:"samples,omitempty"`
	NA      string    `json:"na,omitempty"` // why it was not measured
	Target  *Target   `json:"target,omitempty"`
}

// Target is one of issue 8's targets for a figure.
type Target struct {
	Op    string  `json:"op"` // "<=", ">=" or "within" (Value to Hi)
	Value float64 `json:"value"`
	Hi    float64 `json:"hi,omitempty"`
	Of    string  `json:"of"`            // the statistic judged: "median" or "max"
	Met   *bool   `json:"met,omitempty"` // nil when the figure is NA
}

func (t *Target) String() string {
	s := fmt.Sprintf("%s %s %s", t.Of, t.Op, num(t.Value))
	if t.Op == "within" {
		s = fmt.Sprintf("%s within %s–%s", t.Of, num(t.Value), num(t.Hi))
	}
	switch {
	case t.Met == nil:
		return s
	case *t.Met:
		return s + ": met"
	}
	return s + ": MISSED"
}

// goal sets a target on the figure added last and judges it.
func (r *Report) goal(op string, v float64, of string) {
	r.judge(&Target{Op: op, Value: v, Of: of})
}

// goalWithin sets the target lo ≤ statistic ≤ hi on the figure added
// last and judges it.
func (r *Report) goalWithin(lo, hi float64, of string) {
	r.judge(&Target{Op: "within", Value: lo, Hi: hi, Of: of})
}

func (r *Report) judge(t *Target) {
	f := &r.Figures[len(r.Figures)-1]
	if f.NA == "" {
		x := f.Median
		if t.Of == "max" {
			x = f.Max
		}
		var met bool
		switch t.Op {
		case "<=":
			met = x <= t.Value
		case ">=":
			met = x >= t.Value
		case "within":
			met = t.Value <= x && x <= t.Hi
		}
		t.Met = &met
	}
	f.Target = t
}

// Report is the whole benchmark: the table and what produced it.
type Report struct {
	Start   time.Time   `json:"start"`
	End     time.Time   `json:"end"`
	Host    rundir.Host `json:"host"`
	Config  Config      `json:"config"`
	Figures []Figure    `json:"figures"`
}

// Add appends a figure of samples; none makes it NA for reason na.
func (r *Report) Add(section, name, unit string, samples []float64, na string) {
	f := Figure{Section: section, Name: name, Unit: unit, N: len(samples), Samples: samples}
	if len(samples) == 0 {
		if na == "" {
			na = "no sample"
		}
		f.NA = na
	} else {
		f.Median, f.Min, f.Max = summarize(samples)
	}
	r.Figures = append(r.Figures, f)
}

// NA appends a figure that could not be measured, saying why.
func (r *Report) NA(section, name, unit, why string) { r.Add(section, name, unit, nil, why) }

// summarize is the median (mean of the middle two for an even count), min
// and max.
func summarize(xs []float64) (med, lo, hi float64) {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}

// WriteTable prints the report as one aligned table.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SECTION\tFIGURE\tUNIT\tN\tMEDIAN\tMIN\tMAX\tTARGET")
	for _, f := range r.Figures {
		if f.NA != "" {
			// The JSON keeps the whole reason; the table its start.
			na := f.NA
			if len(na) > 100 {
				na = na[:100] + "..."
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\tNA: %s\t\t\t%s\n", f.Section, f.Name, f.Unit, f.N, na, target(f))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", f.Section, f.Name, f.Unit, f.N, num(f.Median), num(f.Min), num(f.Max), target(f))
	}
	return tw.Flush()
}

func target(f Figure) string {
	if f.Target == nil {
		return ""
	}
	return f.Target.String()
}

// num prints ratios with three decimals and large counts whole.
func num(v float64) string {
	switch {
	case math.IsInf(v, 0) || math.IsNaN(v):
		return fmt.Sprint(v)
	case math.Abs(v) >= 1000:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// Run runs every part of the benchmark in turn. A part that fails leaves
// its figures NA with the error, so that one broken part does not hide
// the others.
func Run(cfg Config) *Report {
	r := &Report{Start: time.Now(), Host: proc.HostInfo(), Config: cfg}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.runs("overhead") || cfg.runs("scale") || cfg.runs("sweep") {
		model, err := Model(cfg)
		if err != nil {
			r.NA("overhead", "all arms", "", err.Error())
		} else {
			if cfg.runs("overhead") {
				arms := []Arm{
					{Name: "a ram default", Floor: true},
					{Name: "b ram ops", Probe: "ops"},
					{Name: "c memlimit cold default", Cold: true, Floor: true},
				}
				arms = append(arms, tierArms(cfg)...)
				arms = append(arms, driverArms()...)
				arms = append(arms, hybridArms()...)
				arms = append(arms, faultArms(cfg)...)
				if cfg.Sched {
					arms = append(arms, Arm{Name: "d ram sched", Probe: "sched"})
				}
				for _, a := range arms {
					if cfg.runsArm(a.Name) {
						Overhead(r, cfg, model, a)
					}
				}
			}
			if cfg.runs("scale") {
				Scale(r, cfg, model)
			}
			if cfg.runs("sweep") {
				SweepUntraced(r, cfg, model)
			}
		}
	}
	for _, s := range []struct {
		name string
		run  func(*Report, Config)
	}{{"probes", ProbeCost}, {"store", Store}, {"toucher", Toucher}, {"warden", Warden}, {"predict", Predict}, {"prefetch", Prefetch}, {"a3b", A3B}} {
		if cfg.runs(s.name) {
			s.run(r, cfg)
		}
	}
	r.End = time.Now()
	return r
}

func logf(cfg Config, format string, a ...any) {
	fmt.Fprintf(cfg.Log, "bench: "+format+"\n", a...)
}

// lostLogTries is how many times a run whose llama.cpp lost its eval-time
// line runs in all.
const lostLogTries = 3

// again runs run until its llama.cpp reports its decode speed, at most
// lostLogTries times. llama.cpp's log thread is not flushed at exit
// (sweep.NoReport): a run that lost the line measured nothing, so it is
// run again rather than judged, and the loss is logged. Any other error
// ends it at once.
func again[T any](cfg Config, run func() (T, error)) (T, error) {
	r, err := run()
	for try := 1; try < lostLogTries && err != nil && strings.Contains(err.Error(), sweep.NoReportedTokensPerS); try++ {
		logf(cfg, "%v: run %d of at most %d", err, try+1, lostLogTries)
		r, err = run()
	}
	return r, err
}

// orNA turns an error into the NA reason of figures it left unmeasured.
func orNA(err error) string {
	if err == nil {
		return ""
	}
	return strings.SplitN(err.Error(), "\n", 2)[0]
}

// ProbeCost adds the calibrated cost of one uprobe hit on this machine,
// one sample per round (bpf.MeasureUprobeCost), on a function whose first
// instruction the kernel emulates and on one it steps out of line.
func ProbeCost(r *Report, cfg Config) {
	rounds := 7
	if cfg.Short {
		rounds = 2
	}
	for _, first := range []bpf.FirstInstruction{bpf.Emulated, bpf.Stepped} {
		name := fmt.Sprintf("uprobe hit cost (calibrated, %v first instruction)", first)
		c, err := bpf.MeasureUprobeCost(5000, rounds, first)
		if err != nil {
			r.NA("probes", name, "us", err.Error())
			continue
		}
		var us []float64
		for _, d := range c.PerRound {
			us = append(us, float64(d)/1e3)
		}
		r.Add("probes", name, "us", us, "")
	}
}
