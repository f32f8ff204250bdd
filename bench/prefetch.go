package bench

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// The prefetch section (issue 39): `iocorr prefetch` against the same
// command run plainly, cold under the same budget, in interleaved pairs,
// on the demo MoE, the skewed router and a near-uniform qwen3moe model, at
// two budgets each, the demo MoE once more with the disk's read-ahead
// at 128 KiB (most distributions' default; this VM's is 8 MiB), where the
// read-around is small, and qwen3moe on a disk held to 300 MB/s
// (slowDisk), where the device's bandwidth, not its latency, is what a
// token waits on on any lab disk, and the demo MoE on a disk each of whose
// reads takes 2 ms however many are in flight (farDisk), where one read
// at a time is what a token waits on. Each of five pairs (prefetchPairCount) gives the ratios of decode tokens/s (as
// llama.cpp reports them) and of the bytes the model's disk read; each
// run its I/O stall share, and each prefetched run the share of what it
// asked for that arrived before use and the prefetcher's own CPU (its
// helper's and iocorr's on the picks) against the whole run's.
//
// One traced plain run of each case gives what a user has before trying
// the prefetcher: its decode's verdict (stats' I/O shape), whether plan
// advises the prefetcher, and predict --prefetch's decode tokens/s and
// bytes, in the readers' mode three traced prefetched runs fell in, held
// to those traced runs' medians (recorded as the plain run was, right
// after it; the untraced pairs' tokens/s is given beside); and
// plan's read-ahead advice, held to interleaved plain runs at the disk's
// own read_ahead_kb and at the advised one (readaheadPairs).
//
// The command runs one thread: the prefetcher's helper reads the slices
// in on a CPU of its own (a fadvise brings each page in on the caller's
// CPU, reclaim under the budget included), and this VM has two. With a
// thread on each CPU the helper's ~1 s a run is taken from the command's
// compute, which the prediction does not model.

const prefetchSection = "prefetch"

// prefetchCase is one model at its budgets.
type prefetchCase struct {
	name    string
	model   func(Config) (string, error)
	budgets []string
	// readAheadKB is the model disk's read_ahead_kb for the case's runs (0:
	// as it is), set before them and restored after.
	readAheadKB int
	// diskMBps, when set, puts the model on a disk that serves that many
	// MB a second at any depth (slowDisk) for the case's runs.
	diskMBps int64
	// diskLatency, when set, puts it on a disk each of whose reads takes
	// that long however many are in flight (farDisk).
	diskLatency time.Duration
}

func prefetchCases() []prefetchCase {
	synth := func(file string, flags ...string) func(Config) (string, error) {
		return func(cfg Config) (string, error) { return synthModel(cfg, file, flags...) }
	}
	qwen := synth("qwen3moe.gguf", "--arch", "qwen3moe", "--layers", "8", "--embd", "768", "--ff", "1024",
		"--heads", "12", "--experts", "8", "--experts-used", "2", "--type", "bf16")
	return []prefetchCase{
		{"demo MoE", Model, []string{"96MiB", "160MiB"}, 0, 0, 0},
		// predictSkew's model: 614 MiB, its hot experts re-read each token
		// at 192 MiB.
		{"skewed router", synth("skewed.gguf", "--layers", "8", "--embd", "768", "--ff", "2048", "--heads", "12",
			"--experts", "8", "--experts-used", "2", "--type", "bf16", "--router-skew", "2"), []string{"192MiB", "320MiB"}, 0, 0, 0},
		{"qwen3moe (near-uniform router)", qwen, []string{"96MiB", "160MiB"}, 0, 0, 0},
		{"demo MoE, read-ahead 128 KiB", Model, []string{"96MiB"}, 128, 0, 0},
		// Bandwidth-bound on any lab disk: the decode keeps the device
		// busy nine tenths of its time at the profile's bandwidth.
		{"qwen3moe on a 300 MBps disk", qwen, []string{"160MiB"}, 0, 300, 0},
		// Latency-bound on any lab disk: a network volume at the usual 128
		// KiB read-ahead, where one read at a time gets a tenth of what
		// the disk serves at depth.
		{"demo MoE on a 2 ms disk", Model, []string{"96MiB"}, 128, 0, 2 * time.Millisecond},
	}
}

// prefetchRun is what one run measured.
type prefetchRun struct {
	tps     float64
	read    float64 // bytes the model's disk read
	stall   float64 // PSI io "some" time ÷ wall time
	cpu     float64 // seconds, every process of the run
	arrived *float64
	// evicted is the major faults on picked pages evicted before their
	// use: brought in and faulted on again, or cached when asked and
	// faulted on after the ask (what splits the prefetched runs of the
	// demo MoE at 96 MiB in two modes).
	evicted  *float64
	ownCPU   *float64 // the prefetcher's seconds
	stallErr string
}

func (p prefetchRun) String() string {
	s := fmt.Sprintf("%.2f tok/s, %.0f MB read, stall share %.3f, CPU %.2f s", p.tps, p.read/1e6, p.stall, p.cpu)
	if p.arrived != nil {
		s += fmt.Sprintf(", arrived %.3f", *p.arrived)
	}
	if p.evicted != nil {
		s += fmt.Sprintf(", %.0f faults on pages evicted before use", *p.evicted)
	}
	if p.ownCPU != nil {
		s += fmt.Sprintf(", prefetcher CPU %.3f s", *p.ownCPU)
	}
	return s
}

// Prefetch adds the section's figures.
func Prefetch(r *Report, cfg Config) {
	cases := prefetchCases()
	if cfg.Short {
		// Proves the section works: one model, one budget, one pair.
		c := cases[0]
		c.budgets = c.budgets[:1]
		cases = []prefetchCase{c}
	}
	if len(cfg.PrefetchCases) > 0 {
		cases = slices.DeleteFunc(cases, func(c prefetchCase) bool {
			return !slices.ContainsFunc(cfg.PrefetchCases, func(s string) bool { return strings.Contains(c.name, s) })
		})
	}
	cfg.Threads = 1
	if old, ok := os.LookupEnv(rundir.DiskProfilesEnv); ok {
		defer os.Setenv(rundir.DiskProfilesEnv, old)
	} else {
		defer os.Unsetenv(rundir.DiskProfilesEnv)
	}
	if err := profileDisk(cfg); err != nil {
		r.NA(prefetchSection, "the model disk's profile (iocorr doctor --disk)", "", err.Error())
		return
	}
	for _, c := range cases {
		model, err := c.model(cfg)
		if err != nil {
			r.NA(prefetchSection, c.name, "", orNA(err))
			continue
		}
		prefetchCaseRuns(r, cfg, c, model)
	}
}

// prefetchCaseRuns runs a case's budgets, with the disk's read-ahead it
// asks for put back and its slow disk undone however they end.
func prefetchCaseRuns(r *Report, cfg Config, c prefetchCase, model string) {
	// undone runs what undoes a set-up when the case ends, and says where
	// that failed.
	undone := func(what string, undo func() error) {
		if err := undo(); err != nil {
			r.NA(prefetchSection, c.name+": "+what, "", err.Error())
		}
	}
	if c.diskMBps > 0 {
		slow, undo, err := slowDisk(cfg, model, c.diskMBps*1e6)
		if err != nil {
			r.NA(prefetchSection, c.name, "", err.Error())
			return
		}
		defer undone("slow disk undone", undo)
		model = slow
	}
	if c.diskLatency > 0 {
		far, undo, err := farDisk(cfg, model, c.diskLatency)
		if err != nil {
			r.NA(prefetchSection, c.name, "", err.Error())
			return
		}
		defer undone("far disk undone", undo)
		model = far
	}
	restore, err := setReadAhead(cfg, model, c.readAheadKB)
	if err != nil {
		r.NA(prefetchSection, c.name, "", err.Error())
		return
	}
	defer undone("read_ahead_kb put back", restore)
	for _, b := range c.budgets {
		name := c.name + " at " + b
		before := prefetchBefore(r, cfg, name, model, b)
		prefetchPairs(r, cfg, name, model, b, before)
		readaheadPairs(r, cfg, name, model, b, before)
	}
}

// profileDisk measures the model disk once (iocorr doctor --disk) into a
// profile folder of the bench's own, which every iocorr the section runs
// reads: the verdicts and plan's advice then do not depend on whether
// the machine's disk was profiled before, nor on when.
func profileDisk(cfg Config) error {
	model, err := Model(cfg)
	if err != nil {
		return err
	}
	dir := filepath.Join(cfg.WorkDir, "prefetch", "disks")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Setenv(rundir.DiskProfilesEnv, dir); err != nil {
		return err
	}
	// doctor --disk measures the disk, not the cache: the model must not
	// be in it.
	if _, _, err := pagecache.Evict(model); err != nil {
		return err
	}
	logf(cfg, "iocorr doctor --disk %s (profiles in %s)", model, dir)
	if out, err := exec.Command(cfg.Iocorr, "doctor", "--disk", model).CombinedOutput(); err != nil {
		return fmt.Errorf("iocorr doctor --disk: %w: %s", err, sweep.LastLine(out))
	}
	return nil
}

// setReadAhead sets the model disk's read_ahead_kb to kb (0: leaves it)
// and returns what puts it back.
func setReadAhead(cfg Config, model string, kb int) (func() error, error) {
	if kb == 0 {
		return func() error { return nil }, nil
	}
	disk, err := modelDisk(model)
	if err != nil {
		return nil, err
	}
	p := filepath.Join("/sys/block", disk, "queue", "read_ahead_kb")
	old, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read_ahead_kb of %s: %w", disk, err)
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(kb)), 0); err != nil {
		return nil, fmt.Errorf("setting read_ahead_kb of %s: %w", disk, err)
	}
	// Said, so that a bench stopped before it puts it back says what to.
	logf(cfg, "read_ahead_kb of %s set to %d (it was %s; `echo %s > %s` puts it back)", disk, kb, strings.TrimSpace(string(old)), strings.TrimSpace(string(old)), p)
	return func() error { return os.WriteFile(p, old, 0) }, nil
}

// before is what one traced plain run of a case tells a user before
// they try the prefetcher.
type before struct {
	verdict string // of the decode, by stats' I/O shape
	advised bool   // plan advises the prefetcher
	// pf is the prefetcher the prefetched runs run: the one plan advises,
	// else the experts' at the default window (forced).
	pf advice
	// predicted are predict's decode figures of pf's policy, in the
	// readers' mode the traced prefetched runs fell in (nil: NA, why says
	// why).
	predictedTPS, predictedBytes *float64
	why                          string
	// prefetchedBytes and prefetchedTPS are the decode bytes per token
	// and tokens/s of traced prefetched runs (record --prefetch): what
	// the prediction is held to. They are recorded as the plain run it
	// learned the compute from was, and right after it: the untraced
	// pairs come minutes later, and on the lab's VM the host's speed
	// drifted by a quarter within one case's five pairs (the demo MoE at
	// 160 MiB, 2026-12-06: prefetched 8.97, 9.37, 10.0, 11.53 and 11.59
	// tokens/s in turn, each pair's ratio 1.89–2.04).
	prefetchedBytes, prefetchedTPS []float64
	prefetchedWhy                  string
	// dir is the traced plain run, mode the readers' mode whose kernel
	// row is nearest what it read ("" where none was found).
	dir, mode string
	// readahead is plan's advice on the disk's read-ahead (nil where the
	// plan was not made: why says why).
	readahead *pin.Readahead
}

// advice is a prefetcher plan advises (or the bench forces).
type advice struct {
	layers  bool  // --layers: prefetch-both, else prefetch-experts
	window  int64 // --window; 0 is the default
	release bool  // --release
}

func (a advice) policy() string {
	if a.layers {
		return "prefetch-both"
	}
	return "prefetch-experts"
}

// prefetchFlags are a's flags of iocorr prefetch.
func (a advice) prefetchFlags() []string {
	var f []string
	if a.layers {
		f = append(f, "--layers")
	}
	if a.window > 0 {
		f = append(f, "--window", strconv.FormatInt(a.window, 10))
	}
	if a.release {
		f = append(f, "--release")
	}
	return f
}

// recordFlags are a's flags of iocorr record.
func (a advice) recordFlags() []string {
	f := []string{"--prefetch"}
	if a.layers {
		f = append(f, "--prefetch-layers")
	}
	if a.window > 0 {
		f = append(f, "--prefetch-window", strconv.FormatInt(a.window, 10))
	}
	if a.release {
		f = append(f, "--prefetch-release")
	}
	return f
}

// predictFlags are predict's flags that predict a's runs.
func (a advice) predictFlags() []string {
	f := []string{"--prefetch", strings.TrimPrefix(a.policy(), "prefetch-")}
	if a.release {
		f = append(f, "--release")
	}
	return f
}

// adviceOf is the prefetcher plan.json's advice runs, and whether it
// advises one: a plan without advice is an error, not "none".
func adviceOf(p *pin.Plan) (advice, bool, error) {
	switch {
	case p.Prefetch == nil:
		return advice{}, false, fmt.Errorf("the plan carries no prefetch advice")
	case p.Prefetch.Policy == "":
		return advice{}, false, nil
	}
	return advice{layers: p.Prefetch.Layers, window: p.Prefetch.WindowBytes, release: p.Prefetch.Release}, true, nil
}

// prefetchBefore records the command once, traced and cold under budget,
// and asks stats, plan and predict what it says of the prefetcher.
func prefetchBefore(r *Report, cfg Config, name, model, budget string) before {
	var b before
	dir := filepath.Join(cfg.WorkDir, "prefetch", strings.NewReplacer(" ", "_", ",", "").Replace(name)+"-traced")
	b.dir = dir
	argv := cfg.completionArgv(model)
	run, err := recordCold(cfg, dir, budget, "", argv)
	if err != nil {
		b.why = err.Error()
		return b
	}
	out, err := exec.Command(cfg.Iocorr, "export", "-i", dir, "stats", "--table", "io_shape", "--format", "json").Output()
	if err != nil {
		b.why = fmt.Sprintf("iocorr export stats: %v", err)
		return b
	}
	var shape []struct {
		Phase      string   `json:"phase"`
		Verdict    *string  `json:"verdict"`
		StallShare *float64 `json:"stall_share"`
		WaitShare  *float64 `json:"wait_share"`
	}
	if err := json.Unmarshal(out, &shape); err != nil {
		b.why = fmt.Sprintf("io_shape's JSON: %v", err)
		return b
	}
	for _, s := range shape {
		if s.Phase == "decode" && s.Verdict != nil {
			b.verdict = *s.Verdict
			logf(cfg, "%s: traced decode: %s, stall share %s, wait share %s", name, b.verdict, fmtShare(s.StallShare), fmtShare(s.WaitShare))
		}
	}
	plan := filepath.Join(dir, "plan.json")
	if out, err := exec.Command(cfg.Iocorr, "plan", "-i", dir, "--mem-limit", budget, "-o", plan).CombinedOutput(); err != nil {
		b.why = fmt.Sprintf("iocorr plan: %v: %s", err, sweep.LastLine(out))
		return b
	}
	p, err := pin.Read(plan)
	if err != nil {
		b.why = err.Error()
		return b
	}
	b.readahead = p.Readahead
	// The prefetched runs run what plan advises: its policy and window.
	if b.pf, b.advised, err = adviceOf(p); err != nil {
		b.why = err.Error()
		return b
	}
	rows, err := predictRows(cfg, dir, []string{budget}, "", b.pf.predictFlags()...)
	if err != nil {
		b.why = err.Error()
		return b
	}
	// The plain runs' mode: the one whose kernel row is nearest what the
	// run read.
	best := -1.0
	for _, k := range rows {
		if k.Policy == "kernel" && k.Phase == "decode" && k.Bytes != nil {
			if d := math.Abs(*k.Bytes - *run.Bytes); best < 0 || d < best {
				best, b.mode = d, k.Mode
			}
		}
	}
	for i := 1; i <= predictRepeats(cfg); i++ {
		m, err := recordCold(cfg, fmt.Sprintf("%s-prefetched-%d", dir, i), budget, "", argv, b.pf.recordFlags()...)
		if err != nil {
			b.prefetchedWhy = err.Error()
			break
		}
		b.prefetchedBytes = append(b.prefetchedBytes, *m.Bytes)
		if m.TPS != nil {
			b.prefetchedTPS = append(b.prefetchedTPS, *m.TPS)
		}
	}
	var pfMode string
	b.predictedTPS, b.predictedBytes, pfMode, b.why = prefetchedMode(rows, b.pf.policy(), b.prefetchedBytes, b.prefetchedWhy)
	if pfMode != "" {
		logf(cfg, "prefetch %s: the traced prefetched runs fell in predict's %s mode (the plain run in its %s)", name, pfMode, cmp.Or(b.mode, "NA"))
	}
	logf(cfg, "prefetch %s, traced plain run: decode %s, plan advises the prefetcher: %v (the prefetched runs: %s %s)", name, b.verdict, b.advised, b.pf.policy(), strings.Join(b.pf.prefetchFlags(), " "))
	return b
}

// prefetchedMode is predict's decode figures of policy in the readers'
// mode the traced prefetched runs fell in: the mode whose row is nearest
// the median of what they read a decode token. predict gives a prefetched
// run both modes whatever the plain run's (the helper is a second reader
// of the model), and its runs fall in either: the one-thread demo MoE's
// at 96 MiB in the racing readers' in one section and in one reader's in
// the next, at 160 MiB in one reader's in both. why is set where no
// figure can be held to the runs.
func prefetchedMode(rows []predictRow, policy string, prefetched []float64, prefetchedWhy string) (tps, bytes *float64, mode, why string) {
	if len(prefetched) == 0 {
		return nil, nil, "", "no traced prefetched run tells the readers' mode: " + cmp.Or(prefetchedWhy, "none ran")
	}
	med, _, _ := summarize(prefetched)
	best := -1.0
	why = "predict gave no decode row of " + policy
	for _, p := range rows {
		if p.Policy != policy || p.Phase != "decode" {
			continue
		}
		if p.Bytes == nil {
			if best < 0 {
				why = cmp.Or(p.Why, "predict's decode bytes of "+policy+" are NA")
			}
			continue
		}
		if d := math.Abs(*p.Bytes - med); best < 0 || d < best {
			best, tps, bytes, mode, why = d, p.TPS, p.Bytes, p.Mode, p.Why
		}
	}
	return tps, bytes, mode, why
}

// prefetchPairCount is how many pairs a case runs. Five, not three: the
// plain runs of the demo MoE at 128 KiB of read-ahead gave 9.4 to 15.0
// tokens/s in one section (their read-arounds race), and three pairs'
// ratios of 0.76, 1.10 and 0.93 put "forcing costs at most 5%" below
// its goal where six pairs of two sections gave a median of 1.05.
func prefetchPairCount(cfg Config) int {
	if cfg.Short {
		return 1
	}
	return 5
}

// prefetchPairs runs the pairs of one model at one budget.
func prefetchPairs(r *Report, cfg Config, name, model, budget string, bf before) {
	argv := cfg.completionArgv(model)
	var plain, pf []prefetchRun
	pairs := prefetchPairCount(cfg)
	for i := range pairs {
		for k := range 2 {
			var run prefetchRun
			var err error
			if (i+k)%2 == 0 {
				run, err = again(cfg, func() (prefetchRun, error) { return plainPrefetchRun(cfg, argv, model, budget) })
				if err == nil {
					plain = append(plain, run)
				}
			} else {
				report := filepath.Join(cfg.WorkDir, "prefetch", fmt.Sprintf("%s-%d.json", strings.ReplaceAll(name, " ", "_"), i))
				run, err = again(cfg, func() (prefetchRun, error) { return prefetchedRun(cfg, argv, model, budget, report, bf.pf) })
				if err == nil {
					pf = append(pf, run)
				}
			}
			if err != nil {
				r.NA(prefetchSection, name+": prefetch ÷ plain decode tokens/s", "ratio", orNA(err))
				return
			}
			logf(cfg, "prefetch %s round %d: %s", name, i, run)
		}
	}
	var tps, read, arrived, evicted, own, stallP, stallQ []float64
	var stallNA string
	for i := range min(len(plain), len(pf)) {
		tps = append(tps, pf[i].tps/plain[i].tps)
		if plain[i].read > 0 {
			read = append(read, pf[i].read/plain[i].read)
		}
		if pf[i].arrived != nil {
			arrived = append(arrived, *pf[i].arrived)
		}
		if pf[i].evicted != nil {
			evicted = append(evicted, *pf[i].evicted)
		}
		if pf[i].ownCPU != nil && pf[i].cpu > 0 {
			own = append(own, *pf[i].ownCPU/pf[i].cpu)
		}
		if plain[i].stallErr != "" || pf[i].stallErr != "" {
			stallNA = plain[i].stallErr + pf[i].stallErr
			continue
		}
		stallP, stallQ = append(stallP, plain[i].stall), append(stallQ, pf[i].stall)
	}
	of := func(runs []prefetchRun) []float64 {
		var out []float64
		for _, x := range runs {
			out = append(out, x.tps)
		}
		return out
	}
	r.Add(prefetchSection, name+": plain decode tokens/s", "tok/s", of(plain), "")
	r.Add(prefetchSection, name+": prefetch decode tokens/s", "tok/s", of(pf), "")
	// What the traced plain run said decides what the prefetcher is held
	// to: on a latency-bound decode it must pay, on a bandwidth-bound one
	// it must cost little (where plan advises it there, it must pay, as
	// the advice's agreement holds). On a compute-bound one only the
	// advice's agreement holds it: little of the stall is wait, and it
	// pays only where it reads fewer bytes.
	verdict := bf.verdict
	if verdict == "" {
		verdict = "NA"
	}
	r.Add(prefetchSection, name+": prefetch ÷ plain decode tokens/s (the traced run's decode: "+verdict+")", "ratio", tps, "")
	switch bf.verdict {
	case rundir.BoundLatency:
		r.goal(">=", 1.3, "median")
	case rundir.BoundBandwidth:
		// Forcing it where the device's bandwidth is the cost.
		r.goal(">=", 0.95, "median")
	}
	r.Add(prefetchSection, name+": prefetch ÷ plain bytes the disk read", "ratio", read, "the plain runs read nothing")
	if bf.verdict == rundir.BoundLatency {
		r.goal("<=", 1.05, "median")
	}
	// plan's advice agrees with the pairs: it advised the prefetcher
	// where the pairs measured it paying (≥ 1.1× the tokens/s at ≤ 1.05×
	// the bytes, plan's own thresholds), and not elsewhere.
	agrees := []float64{}
	if len(tps) > 0 && len(read) > 0 && bf.why == "" {
		t, _, _ := summarize(tps)
		b, _, _ := summarize(read)
		if bf.advised == (t >= 1.1 && b <= 1.05) {
			agrees = append(agrees, 1)
		} else {
			agrees = append(agrees, 0)
		}
		logf(cfg, "prefetch %s: plan advised %v; measured %.3f× the tokens/s, %.3f× the bytes", name, bf.advised, t, b)
	}
	r.Add(prefetchSection, name+": plan's advice agrees with the measured pairs (1 yes, 0 no)", "bool", agrees, cmp.Or(bf.why, "no pair measured"))
	r.goal(">=", 1, "median")
	predictedFigures(r, name, bf, pf)
	r.Add(prefetchSection, name+": I/O stall share, plain (PSI io some ÷ wall)", "share", stallP, stallNA)
	r.Add(prefetchSection, name+": I/O stall share, prefetch (PSI io some ÷ wall)", "share", stallQ, stallNA)
	r.Add(prefetchSection, name+": share of the bytes asked that arrived before use", "share", arrived, "the prefetcher's outcomes were NA")
	r.Add(prefetchSection, name+": major faults on picked pages evicted before use, a prefetched run", "count", evicted, "the prefetcher's outcomes were NA")
	r.Add(prefetchSection, name+": the prefetcher's CPU ÷ the run's", "share", own, "no CPU figure")
}

// ioWatch is the model disk's sectors read and the system's PSI io stall
// at one moment.
type ioWatch struct {
	at      time.Time
	sectors uint64
	some    uint64 // µs
	someErr error
}

func watchIO(disk string) (ioWatch, error) {
	w := ioWatch{at: time.Now()}
	st, err := blockdev.DiskStats(disk)
	if err != nil || len(st) != 1 {
		return w, fmt.Errorf("diskstats of %s: %v", disk, err)
	}
	w.sectors = st[0].SectorsRead
	w.some, w.someErr = psiIOSome()
	return w, nil
}

// psiIOSome is /proc/pressure/io's "some" total: µs in which at least one
// task of the machine waited on I/O. System-wide (a memory cgroup of v1
// has no pressure files), so the bench wants a quiet machine.
func psiIOSome() (uint64, error) {
	b, err := os.ReadFile("/proc/pressure/io")
	if err != nil {
		return 0, fmt.Errorf("no PSI on this kernel: %w", err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "some "); ok {
			for _, f := range strings.Fields(rest) {
				if v, ok := strings.CutPrefix(f, "total="); ok {
					return strconv.ParseUint(v, 10, 64)
				}
			}
		}
	}
	return 0, fmt.Errorf("/proc/pressure/io has no some total")
}

// since fills run's read bytes and stall share from before to now.
func (w ioWatch) since(disk string, run *prefetchRun) error {
	now, err := watchIO(disk)
	if err != nil {
		return err
	}
	run.read = float64(now.sectors-w.sectors) * 512
	if w.someErr != nil || now.someErr != nil {
		run.stallErr = fmt.Sprint(w.someErr, now.someErr)
		return nil
	}
	run.stall = float64(now.some-w.some) / float64(now.at.Sub(w.at).Microseconds())
	return nil
}

func modelDisk(model string) (string, error) {
	bd, err := blockdev.OfFile(model)
	if err != nil {
		return "", err
	}
	return blockdev.DiskName(bd), nil
}

// plainPrefetchRun is the command untraced under the budget, cold.
func plainPrefetchRun(cfg Config, argv []string, model, budget string) (prefetchRun, error) {
	var run prefetchRun
	disk, err := modelDisk(model)
	if err != nil {
		return run, err
	}
	c := cfg
	c.MemLimit = size(budget)
	w, err := watchIO(disk)
	if err != nil {
		return run, err
	}
	s, out, errOut, err := runHeld(c, argv, model, true)
	if err != nil {
		return run, err
	}
	if err := w.since(disk, &run); err != nil {
		return run, err
	}
	all := append(out, errOut...)
	tps, ok := sweep.ReportedTokensPerS(all)
	if !ok {
		return run, errors.New("plain run: " + sweep.NoReport(all))
	}
	run.tps, run.cpu = tps, s.cpu
	return run, nil
}

// prefetchedRun is `iocorr prefetch [a's flags] --cold --mem-limit
// budget` of the command, its report written to report.
func prefetchedRun(cfg Config, argv []string, model, budget, report string, a advice) (prefetchRun, error) {
	var run prefetchRun
	disk, err := modelDisk(model)
	if err != nil {
		return run, err
	}
	if err := os.MkdirAll(filepath.Dir(report), 0o755); err != nil {
		return run, err
	}
	args := append(append(append([]string{"prefetch"}, a.prefetchFlags()...), "--cold", "--mem-limit", budget, "--report", report, "--"), argv...)
	logf(cfg, "iocorr %s", strings.Join(args, " "))
	w, err := watchIO(disk)
	if err != nil {
		return run, err
	}
	cmd := exec.Command(cfg.Iocorr, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return run, fmt.Errorf("iocorr prefetch: %w: %s", err, sweep.LastLine(out.Bytes()))
	}
	if err := w.since(disk, &run); err != nil {
		return run, err
	}
	tps, ok := sweep.ReportedTokensPerS(out.Bytes())
	if !ok {
		return run, errors.New("prefetched run: " + sweep.NoReport(out.Bytes()))
	}
	run.tps = tps
	// iocorr, the command and the helper: wait4 counts the children
	// iocorr reaped.
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		run.cpu = float64(syscall.TimevalToNsec(ru.Utime)+syscall.TimevalToNsec(ru.Stime)) / 1e9
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return run, err
	}
	var rep rundir.Prefetched
	if err := json.Unmarshal(b, &rep); err != nil {
		return run, fmt.Errorf("%s: %w", report, err)
	}
	if rep.OutcomeNA == "" && rep.AskedBytes > 0 {
		a := float64(rep.ArrivedBytes) / float64(rep.AskedBytes)
		run.arrived = &a
	}
	if rep.OutcomeNA == "" {
		e := float64(rep.EvictedUnusedBytes/int64(kernel.PageSize)) + float64(rep.CachedMajorFaults)
		run.evicted = &e
	}
	own := float64(rep.HelperCPUNS+rep.SelfCPUNS) / 1e9
	run.ownCPU = &own
	return run, nil
}

func fmtShare(v *float64) string {
	if v == nil {
		return "NA"
	}
	return fmt.Sprintf("%.2f", *v)
}

// predictedFigures holds predict's decode figures of a case to the
// traced prefetched runs (tokens/s and bytes, each within 15%), and
// gives its tokens/s against the untraced pairs beside, without a goal.
func predictedFigures(r *Report, name string, bf before, pf []prefetchRun) {
	var predTPS, predTraced, predBytes []float64
	if bf.predictedTPS != nil {
		var untraced []float64
		for _, x := range pf {
			untraced = append(untraced, x.tps)
		}
		predTPS, predTraced = over(*bf.predictedTPS, untraced), over(*bf.predictedTPS, bf.prefetchedTPS)
	}
	if bf.predictedBytes != nil {
		predBytes = over(*bf.predictedBytes, bf.prefetchedBytes)
	}
	r.Add(prefetchSection, name+": predict's "+bf.pf.policy()+" ÷ measured decode tokens/s (record --prefetch)", "ratio", predTraced, cmp.Or(bf.why, bf.prefetchedWhy, "predict's figure is NA"))
	r.goalWithin(0.85, 1.15, "median")
	// The untraced pairs' tokens/s, beside: the host's drift over the
	// case's minutes is in it (before.prefetchedTPS).
	r.Add(prefetchSection, name+": predict's "+bf.pf.policy()+" ÷ measured decode tokens/s (the untraced pairs)", "ratio", predTPS, cmp.Or(bf.why, "predict's figure is NA"))
	r.Add(prefetchSection, name+": predict's "+bf.pf.policy()+" ÷ measured decode bytes/token (record --prefetch)", "ratio", predBytes, cmp.Or(bf.why, bf.prefetchedWhy, "predict's figure is NA"))
	r.goalWithin(0.85, 1.15, "median")
}
