// Package predict tells, from one recorded run, what every other memory
// budget would have cost per token: device bytes read, major faults, the
// time waited on them and tokens/s, under the kernel's own page cache
// (a model of Linux's active/inactive lists with the run's readahead), under
// a pin plan (its ranges always resident, the rest to that model) and under
// Belady's bound. The access stream is the run's own: every call's graph
// reads each weight of the model in graph order, and of each *_exps tensor
// the slices of the experts the router picked in that call. It reads the
// store and metadata only (the read side), and Plan ranks what to pin.
//
// The stream is one reader's: each weight read once, front to back. With
// two compute threads ggml-cpu's matrix products hand out a weight's rows
// in chunks (64 rows for one token), each thread taking the next as it
// finishes its last, so two threads fault on neighbouring chunks at once
// and which of them starts a read-around, and where, changes from run to
// run: identical cold runs of the demo MoE at 128 MiB read 338–343 MB a
// decode token in some runs and 383–443 in others, where one thread's runs
// read 339–345 in 8 of 10 (docs/overhead.md, session 16). A prediction is
// the single stream's figure, and a run of two threads may be in the
// other mode: so a run whose decode calls faulted from more than one
// thread is predicted in both (ModeOne, ModeRace), and a plan must win in
// both. Prefetch policies (prefetch.go) add a prefetcher's requests to
// the stream, timed by the trace's own lead times and the device's rate.
package predict

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

// Policies, as rows name them.
const (
	PolicyKernel = "kernel" // the kernel's page cache, as pageCache models it
	PolicyPlan   = "plan"   // a plan's ranges pinned, the rest to the kernel's
	PolicyBelady = "belady" // the offline optimum: no policy reads fewer bytes
	PolicyRun    = "run"    // what the run itself measured at its own budget
)

// Options choose the budgets and the plan.
type Options struct {
	Budgets []int64
	// Pinned are the plan's file ranges (byte offset, length), nil for no
	// plan.
	Pinned [][2]int64
	// Readahead is the fault read-around window in bytes; 0 takes the
	// kernel's (Run.window), ReadaheadCalibrate the one that makes the
	// kernel model read what the run read at its own budget.
	Readahead int64
	// Prefetch are prefetch policies (PolicyPrefetchExperts, ...) to
	// predict beside the others.
	Prefetch []string
	// Release predicts the prefetch policies with the pages a layer's
	// requests brought in released once the layer used them (iocorr
	// prefetch --release).
	Release bool
}

// ReadaheadCalibrate, as a window, asks for the one that reproduces the
// run's own bytes at its budget (Run.calibrate).
const ReadaheadCalibrate int64 = -1

// window is the read-around window in pages for a requested one
// (Options.Readahead). By default it is the kernel's: the model disk's
// read_ahead_kb as the run recorded it, doubled, because llama.cpp's
// loader advises the file POSIX_FADV_SEQUENTIAL before it maps it (Linux;
// the kernel then doubles the file's window, mm/fadvise.c). A window
// calibrated on the run's own bytes instead follows that one run: five
// identical cold runs of the demo MoE at 128 MiB calibrated 11.3, 11.3,
// 19, 26.9 and 26.9 MiB (two compute threads' read-arounds race; the
// package comment), and
// predictions from such runs spread with them, where the kernel's
// window held 33 of 36 budget predictions of a session 16 bench run
// within 10% of the median of three runs (calibrated: 31), and ranked
// plans the way the pinned runs measured them (docs/overhead.md). The run
// is calibrated when its disk's window was not recorded.
func (r *Run) window(requested int64) int32 {
	own, known := r.ownWindow()
	switch {
	case requested > 0:
		return int32(max(requested/pageSize, 1))
	case requested == 0 && known:
		return own
	}
	return r.calibrate()
}

// Row is one prediction: per call of the phase ("token": one llama_decode
// call, as iocorr's per-token tables count them). NA holds why a figure
// is missing, by JSON column name.
type Row struct {
	BudgetBytes         int64
	Policy              string
	Phase               string
	BytesReadPerToken   float64
	MajorFaultsPerToken float64
	StallNSPerToken     float64
	TokensPerS          float64
	// Mode is the readers' mode the row predicts (ModeOne, ModeRace), or
	// ModeAny where the figure does not depend on it, ModeMeasured for
	// the run's own.
	Mode string
	// Note says what a row's figures rest on besides the run (a prefetch
	// row: where the device's rate came from); "" for nothing.
	Note string
	NA   map[string]string
	// computeAdded is the compute time a token gains besides the run's
	// own (a prefetch row: what the helper's reads cost the command).
	computeAdded float64
	// readsPerToken is the device reads the faults made a token (sync and
	// async windows, pages read alone): what faultFloor times.
	readsPerToken float64
}

// Modes of a prediction. A run whose decode calls faulted from more than
// one thread falls in one of two modes (the package comment), and a
// prediction gives both: one reader's stream at the kernel's window, and
// the racing readers' at half as wide again. That widening is measured,
// not derived: identical runs of the demo MoE at 128 MiB calibrated 11.3
// MiB in the one-reader mode and 19–27 MiB in the other against the
// kernel's 16 (docs/overhead.md, session 16), and from one 96 MiB run it
// predicted 256 MiB at 305 MiB a decode token, the mode the runs of 254
// MiB were in, where one reader's 100 held those of 70 and 129.
const (
	ModeOne      = "one-reader"
	ModeRace     = "racing-readers"
	ModeAny      = "any"
	ModeMeasured = "measured"
)

// raceWindow is the racing readers' window for one reader's.
func raceWindow(ra int32) int32 { return ra + ra/2 }

// Columns of a row's figures, as JSON names them.
const (
	ColBytes  = "bytes_read_per_token"
	ColMajors = "major_faults_per_token"
	ColStall  = "stall_ns_per_token"
	ColTPS    = "tokens_per_s"
)

// Figures lists the figure columns in order.
var Figures = []string{ColBytes, ColMajors, ColStall, ColTPS}

// Result is a prediction over budgets.
type Result struct {
	Rows []Row
	// Modes are the readers' modes the rows predict: ModeOne, and
	// ModeRace where the run's decode calls faulted from more than one
	// thread or a prefetch policy is predicted (prefetchModes).
	Modes []string
	// RunMode is the mode whose prediction at the run's own budget is
	// nearest what the run read a decode token, "" where there is one
	// mode or no figure; ModesNote says so in words.
	RunMode, ModesNote string
	// ReadaheadBytes is the read-around window the kernel model used;
	// NonFileBytes the run's memory besides the model, taken from every
	// budget.
	ReadaheadBytes int64
	// DiskReadAheadBytes is the model's disk's read_ahead_kb in bytes when
	// the run was recorded, beside the window the model used; nil when
	// the run did not record it.
	DiskReadAheadBytes *int64
	NonFileBytes       int64
}

// phaseCounts are a simulation's reads and faults per phase.
type phaseCounts map[uint8]*[3]uint64 // bytes, majors, the faults' device reads (pageCache.reads)

func newCounts() phaseCounts {
	return phaseCounts{event.PhasePrefill: {}, event.PhaseDecode: {}}
}

// capacityPages is the page cache the model file gets under budget with
// pinned pages pinned; <= 0 when nothing is left.
func (r *Run) capacityPages(budget int64, pinned int64) int64 {
	return (budget-r.NonFile)/pageSize - pinned
}

// simulate runs the kernel model over the load and every call. count
// makes it count each page's reads in decode calls (cache.readBy).
func (r *Run) simulate(capacity int64, ra int32, pinned []pageRange, count bool) (phaseCounts, *pageCache) {
	c := newPageCache(r.pages, capacity, ra, pinned)
	// The load: llama.cpp maps the file with MAP_POPULATE, reading it front
	// to back before the first call.
	c.access(r.load())
	out := newCounts()
	if count {
		c.readBy = make([]uint32, r.pages)
	}
	for _, cl := range r.calls {
		c.counting = count && cl.phase == event.PhaseDecode
		b0, m0, r0 := c.readPages, c.majors, c.reads
		for _, rg := range cl.reads {
			c.access(rg)
		}
		out[cl.phase][0] += (c.readPages - b0) * pageSize
		out[cl.phase][1] += c.majors - m0
		out[cl.phase][2] += c.reads - r0
	}
	return out, c
}

// load is the pages the load reads before the first call: the tensor
// data, when the run had them in the page cache by then; none otherwise.
func (r *Run) load() pageRange {
	if !r.loaded {
		return pageRange{}
	}
	return bytesToPages(r.Model.DataOffset, r.Model.Size-r.Model.DataOffset)
}

// calibrate picks the read-around window (128 KiB to 32 MiB in steps of
// a fourth of an octave) whose kernel model reads nearest what the run
// read per decode call at its own budget.
func (r *Run) calibrate() int32 {
	m := r.byPhase[event.PhaseDecode]
	want := float64(m.bytes) / float64(max(m.calls, 1))
	best, bestErr := int32(2048), math.Inf(1)
	capacity := r.capacityPages(r.Budget, 0)
	for step := 0; step <= 32; step++ {
		ra := int32(math.Round(32 * math.Pow(2, float64(step)/4)))
		got, _ := r.simulate(capacity, ra, nil, false)
		e := math.Abs(float64(got[event.PhaseDecode][0])/float64(max(m.calls, 1)) - want)
		if e < bestErr {
			best, bestErr = ra, e
		}
	}
	return best
}

func pinnedPages(pinned [][2]int64) ([]pageRange, int64) {
	var rs []pageRange
	seen := map[int32]bool{}
	for _, p := range pinned {
		rg := bytesToPages(p[0], p[1])
		rs = append(rs, rg)
		for q := rg.first; q < rg.end; q++ {
			seen[q] = true
		}
	}
	return rs, int64(len(seen))
}

// Predict computes every row: for each budget the kernel's, the plan's
// (with Options.Pinned), the prefetch policies' (Options.Prefetch), each
// in every readers' mode, and Belady's, each for the prefill and decode;
// and the run's own measurement at its budget.
func Predict(r *Run, opt Options) (*Result, error) {
	if len(opt.Budgets) == 0 {
		return nil, fmt.Errorf("no budget to predict")
	}
	for _, p := range opt.Prefetch {
		if !prefetchesExperts(p) && !prefetchesLayers(p) {
			return nil, fmt.Errorf("no prefetch policy %q", p)
		}
	}
	res := &Result{NonFileBytes: r.NonFile, Modes: r.modes()}
	if len(opt.Prefetch) > 0 {
		res.Modes = slices.Clone(prefetchModes)
	}
	if kb := r.Model.Block.ReadAheadKB; kb != nil {
		b := int64(*kb) << 10
		res.DiskReadAheadBytes = &b
	}
	res.Rows = append(res.Rows, r.measuredRows()...)
	policies := []string{PolicyKernel}
	if opt.Pinned != nil {
		policies = append(policies, PolicyPlan)
	}
	policies = append(policies, opt.Prefetch...)
	policies = append(policies, PolicyBelady)
	why := cmp.Or(r.noFigures, r.picksNA)
	var ra int32
	if why == "" {
		ra = r.window(opt.Readahead)
		res.ReadaheadBytes = int64(ra) * pageSize
	}
	if why == "" && len(r.modes()) > 1 {
		res.RunMode, res.ModesNote = r.runMode(ra)
	}
	if why == "" && len(opt.Prefetch) > 0 {
		res.ModesNote = strings.TrimPrefix(res.ModesNote+"; "+prefetchModesNote, "; ")
	}
	pins, pinPages := pinnedPages(opt.Pinned)
	leads := map[string]map[leadKey]float64{}
	for _, p := range opt.Prefetch {
		if why == "" {
			leads[p] = r.leads(p)
		}
	}
	for _, b := range opt.Budgets {
		for _, pol := range policies {
			modes := r.modes()
			switch {
			case pol == PolicyBelady:
				modes = []string{ModeAny}
			case prefetchesExperts(pol) || prefetchesLayers(pol):
				modes = prefetchModes
			}
			for _, mode := range modes {
				res.Rows = append(res.Rows, r.predictRows(b, pol, mode, ra, pins, pinPages, leads[pol], opt.Release, why)...)
			}
		}
	}
	return res, nil
}

// prefetchModes are the modes of a prefetched run's rows, whatever the
// run's: the prefetcher's helper reads the file beside the graph's
// faults, a second reader, and its runs fall in either mode. Measured on
// one-thread runs of the demo MoE (prefetch-both, three traced runs
// each, 2026-12-06): at 96 MiB they read 265 MB a decode token, where
// the racing readers' mode predicted 286 and one reader's 217 (in the
// next bench section they fell in one reader's); at 160 MiB 172, one
// reader's 181 and the racing readers' 223.
var prefetchModes = []string{ModeOne, ModeRace}

const prefetchModesNote = "a prefetched run's helper reads the model beside its faults: its runs fall in either readers' mode, each predicted"

// modes are the readers' modes a prediction of the run gives.
func (r *Run) modes() []string {
	if r.readers > 1 {
		return []string{ModeOne, ModeRace}
	}
	return []string{ModeOne}
}

// runMode is the mode whose kernel prediction at the run's own budget is
// nearest (by ratio) what it read a decode call, and a note saying so.
func (r *Run) runMode(ra int32) (string, string) {
	m := r.byPhase[event.PhaseDecode]
	capacity := r.capacityPages(r.Budget, 0)
	if m.calls == 0 || m.bytes == 0 || capacity <= 0 {
		return "", ""
	}
	measured := float64(m.bytes) / float64(m.calls)
	best, bestErr, say := "", math.Inf(1), []string{}
	for _, mode := range r.modes() {
		got, _ := r.simulate(capacity, modeWindow(mode, ra), nil, false)
		b := float64(got[event.PhaseDecode][0]) / float64(m.calls)
		say = append(say, fmt.Sprintf("%s %.1f MiB", mode, b/(1<<20)))
		if e := math.Abs(math.Log(max(b, 1) / measured)); e < bestErr {
			best, bestErr = mode, e
		}
	}
	return best, fmt.Sprintf("%d threads faulted in one decode call: runs of this command fall in two modes (their read-arounds race), each predicted; this run read %.1f MiB a decode token at its budget, nearest the %s mode (%s)",
		r.readers, measured/(1<<20), best, strings.Join(say, ", "))
}

// modeWindow is a mode's read-around window for one reader's ra.
func modeWindow(mode string, ra int32) int32 {
	if mode == ModeRace {
		return raceWindow(ra)
	}
	return ra
}

// predictRows are one budget's, policy's and mode's rows, prefill and
// decode.
func (r *Run) predictRows(b int64, pol, mode string, ra int32, pins []pageRange, pinPages int64, leads map[leadKey]float64, release bool, why string) []Row {
	var got phaseCounts
	var pf prefetched
	if why == "" {
		pp := int64(0)
		if pol == PolicyPlan {
			pp = pinPages
		}
		capacity := r.capacityPages(b, pp)
		w := modeWindow(mode, ra)
		switch {
		case capacity <= 0 && pol == PolicyPlan:
			why = "the plan's pinned bytes and the run's non-file memory fill the budget"
		case capacity <= 0:
			why = "the budget is below the run's non-file memory"
		case pol == PolicyBelady:
			got = r.belady(capacity)
		case pol == PolicyPlan:
			got, _ = r.simulate(capacity, w, pins, false)
		case prefetchesExperts(pol) || prefetchesLayers(pol):
			pf = r.simulatePrefetch(capacity, w, nil, pol, leads, release)
		default:
			got, _ = r.simulate(capacity, w, nil, false)
		}
	}
	var rows []Row
	for _, ph := range []uint8{event.PhasePrefill, event.PhaseDecode} {
		var row Row
		if pf.counts != nil {
			row = r.prefetchRow(b, pol, ph, pf, why)
		} else {
			row = r.row(b, pol, ph, got, why)
			// The kernel's and a plan's reads with another window than
			// the run's pay the disk's latency each (faultFloor).
			if why == "" && pol != PolicyBelady && r.otherWindow(ra) {
				r.faultFloor(&row, ph)
			}
		}
		row.Mode = mode
		rows = append(rows, row)
	}
	return rows
}

// row turns a simulation's counts into the figures of one phase.
func (r *Run) row(budget int64, pol string, ph uint8, got phaseCounts, why string) Row {
	row := Row{BudgetBytes: budget, Policy: pol, Phase: event.PhaseName(ph), NA: map[string]string{}}
	m := r.byPhase[ph]
	if why == "" && m.calls == 0 {
		why = "the run has no " + event.PhaseName(ph) + " call"
	}
	if why != "" {
		for _, c := range Figures {
			row.NA[c] = why
		}
		return row
	}
	n := float64(m.calls)
	row.BytesReadPerToken = float64(got[ph][0]) / n
	row.MajorFaultsPerToken = float64(got[ph][1]) / n
	row.readsPerToken = float64(got[ph][2]) / n
	r.time(&row, m)
	return row
}

// noWaitPerByte is why a phase's stall is NA where the run read nothing
// from the device in it.
const noWaitPerByte = "the run read nothing from the device in this phase: its wait per byte was not measured"

// time fills the stall and tokens/s of a row whose bytes are set: the
// stall at the run's measured wait per byte read, the compute at the
// run's wall time per call less its wait.
func (r *Run) time(row *Row, m *measured) {
	switch {
	case row.BytesReadPerToken == 0:
		row.StallNSPerToken = 0
	case m.bytes == 0:
		row.NA[ColStall] = noWaitPerByte
	default:
		row.StallNSPerToken = row.BytesReadPerToken * m.waitPerByte()
	}
	r.tps(row, m)
}

// tps fills the tokens/s of a row whose stall is set (or NA): the
// compute at the run's wall time per call less its wait, plus the stall.
func (r *Run) tps(row *Row, m *measured) {
	if _, na := row.NA[ColStall]; na {
		row.NA[ColTPS] = row.NA[ColStall]
		return
	}
	if m.wallNS == 0 {
		row.NA[ColTPS] = "the run's calls have no start and end times"
		return
	}
	compute := m.computePerCall() + row.computeAdded
	if t := compute + row.StallNSPerToken; t > 0 {
		row.TokensPerS = 1e9 * float64(m.tokens) / float64(m.calls) / t
	} else {
		row.NA[ColTPS] = "the run's calls took no time"
	}
}

// measuredRows are the run's own figures at its budget.
func (r *Run) measuredRows() []Row {
	var out []Row
	for _, ph := range []uint8{event.PhasePrefill, event.PhaseDecode} {
		m := r.byPhase[ph]
		row := Row{BudgetBytes: r.Budget, Policy: PolicyRun, Phase: event.PhaseName(ph), Mode: ModeMeasured, NA: map[string]string{}}
		if m.calls == 0 {
			for _, c := range Figures {
				row.NA[c] = "the run has no " + event.PhaseName(ph) + " call"
			}
			out = append(out, row)
			continue
		}
		n := float64(m.calls)
		row.BytesReadPerToken = float64(m.bytes) / n
		row.MajorFaultsPerToken = float64(m.majors) / n
		row.StallNSPerToken = float64(m.waitNS) / n
		if m.wallNS > 0 {
			row.TokensPerS = 1e9 * float64(m.tokens) / float64(m.wallNS)
		} else {
			row.NA[ColTPS] = "the run's calls have no start and end times"
		}
		out = append(out, row)
	}
	return out
}

// Compute loads the run and predicts: the one call of `iocorr predict`.
func Compute(recorded *store.Run, snaps []rundir.Snapshot, opt Options) (*Result, error) {
	r, err := Load(recorded, snaps)
	if err != nil {
		return nil, err
	}
	return Predict(r, opt)
}

// ModelIdentity is a run's model file's identity, as a plan names it.
func ModelIdentity(m *rundir.ModelFile) pin.ModelID {
	ts := make([]pin.TensorEntry, 0, len(m.Tensors))
	for _, t := range m.Tensors {
		ts = append(ts, pin.TensorEntry{Name: t.Name, Offset: t.Offset, Size: t.Size})
	}
	return pin.Identify(m.Path, m.Size, ts)
}
