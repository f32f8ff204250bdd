package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// Arm is one overhead comparison: untraced against `iocorr record` with
// these probes, and, with Floor, against the bpftrace counting floor.
type Arm struct {
	Name  string
	Probe string // iocorr record --probe; "" for the default set
	Cold  bool   // under Config.MemLimit, model evicted before every run
	Floor bool
	// Driver runs node-llama-cpp's prebuilt llama.cpp through the tests'
	// driver (testdata/llm/generate.mjs) instead of llama-bench: a CET
	// build (every function opens with endbr64) with no thread pool (its
	// compute threads start for every graph, as in any program on llama.h
	// that attaches none).
	Driver bool
	// Hybrid runs llama-bench of llmtest.HybridBin with -ngl 99 -ncmoe 99
	// in llmtest.HybridEnv (hybridArms); hybridDir is that directory,
	// set by Overhead.
	Hybrid    bool
	hybridDir string
	// Env is added to the traced run's environment: IOCORR_WITHOUT makes
	// the recorder take a fallback path (faultArms).
	Env []string
}

// argv is the arm's command line.
func (a Arm) argv(cfg Config, model string) []string {
	if a.Driver {
		return []string{"node", llmtest.Driver(), "--model", model, "--tokens", strconv.Itoa(cfg.tokens(a.Cold)),
			"--threads", strconv.Itoa(cfg.Threads), "--json"}
	}
	argv := cfg.benchArgv(model, a.Cold)
	if a.Hybrid {
		argv[0] = filepath.Join(a.hybridDir, "llama-bench")
		argv = append(argv, "-ngl", "99", "-ncmoe", "99")
	}
	return argv
}

// tokensPerSecond reads the arm's command's report.
func (a Arm) tokensPerSecond(out []byte) (float64, error) {
	if !a.Driver {
		return tokensPerSecond(out)
	}
	res, err := llmtest.ParseResult(out)
	if err != nil || res.TokensPerS <= 0 {
		return 0, fmt.Errorf("the driver reported no tokens/s (%v): %.200q", err, out)
	}
	return res.TokensPerS, nil
}

// Model synthesizes the demo's MoE model (8 layers, 8 experts, 2 used,
// BF16: on a CPU with AMX, F16 weights would be copied into anonymous
// memory and never read from the file again) with iocorr synth, once per
// work directory.
func Model(cfg Config) (string, error) {
	path := filepath.Join(cfg.WorkDir, "model.gguf")
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return "", err
	}
	// synth writes aside and renames: a killed run leaves no partial model.
	out, err := exec.Command(cfg.Iocorr, "synth", "-o", path, "--layers", "8", "--embd", "768", "--ff", "1024",
		"--heads", "12", "--experts", "8", "--experts-used", "2", "--type", "bf16").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("iocorr synth: %w: %s", err, bytes.TrimSpace(out))
	}
	return path, nil
}

// sample is one run of llama-bench, however it was run.
type sample struct {
	tokPerS float64
	cpu     float64 // user+sys seconds of every process of the run
	maxRSS  int64   // KiB: wait4's maxrss (not set for record: see Recorder)
	read    int64   // bytes the processes read from the disk (rusage inblock)
	dir     string  // traced: the run directory
}

// tokens is llama-bench -n for an arm: the cold arms read the model
// again each token, so a few tokens already run for seconds.
func (c Config) tokens(cold bool) int {
	if cold || c.RAMTokens <= 0 {
		return c.Tokens
	}
	return c.RAMTokens
}

func (c Config) benchArgv(model string, cold bool) []string {
	// One repetition: rounds, not llama-bench's repetitions, give the
	// spread, and every repetition under a cold arm would be warm.
	return []string{c.LlamaBench, "-m", model, "-p", "0", "-n", strconv.Itoa(c.tokens(cold)), "-t", strconv.Itoa(c.Threads), "-r", "1", "-o", "json"}
}

// tokensPerSecond reads llama-bench's JSON report.
func tokensPerSecond(out []byte) (float64, error) {
	var rep []struct {
		AvgTS float64 `json:"avg_ts"`
	}
	if err := json.Unmarshal(out, &rep); err != nil || len(rep) != 1 || rep[0].AvgTS <= 0 {
		return 0, fmt.Errorf("llama-bench printed no tokens/s (%v): %.200q", err, out)
	}
	return rep[0].AvgTS, nil
}

func cpuSeconds(ru *syscall.Rusage) float64 {
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime)).Seconds()
}

// untraced runs the arm's command the way iocorr record launches it
// (runHeld).
func untraced(cfg Config, model string, a Arm) (sample, error) {
	s, out, _, err := runHeld(cfg, a.argv(cfg, model), model, a.Cold)
	if err != nil {
		return s, err
	}
	s.tokPerS, err = a.tokensPerSecond(out)
	return s, err
}

// runHeld runs argv untraced the way iocorr record launches a command:
// held by launch.StartHeld, in a memory cgroup of cfg.MemLimit when cold,
// after the same eviction of model. It gives the run's rusage and its
// standard output and error. The caller's main must call
// launch.RunShimIfChild first.
func runHeld(cfg Config, argv []string, model string, cold bool) (s sample, stdout, stderr []byte, err error) {
	var cg *cgroup.Cgroup
	var controls float64
	if cold {
		// In a traced run the recorder makes the cgroup and evicts the
		// model, and its CPU counts them (the eviction alone was 17 ms of
		// a cold run's 250): here they are this thread's work, measured
		// and added, so that CPU traced/untraced compares the tracing
		// alone.
		err := threadCPU(&controls, func() error {
			var err error
			if cg, err = cgroup.NewMemory(cgroup.Name(os.Getpid()), cfg.MemLimit); err != nil {
				return err
			}
			_, _, err = pagecache.Evict(model)
			return err
		})
		if cg != nil {
			defer func() {
				if err := threadCPU(&s.cpu, cg.Remove); err != nil {
					logf(cfg, "removing the untraced run's cgroup: %v", err)
				}
			}()
		}
		if err != nil {
			return s, nil, nil, err
		}
	}
	var place func(int) error
	if cg != nil {
		place = cg.Add
	}
	var out, errb bytes.Buffer
	ex, err := launch.RunHeld(context.Background(), argv, nil, &out, &errb, place)
	if err != nil {
		return s, nil, nil, err
	}
	if ex.Code != 0 || ex.Signal != "" {
		return s, nil, nil, fmt.Errorf("%s exited %d %s: %s", filepath.Base(argv[0]), ex.Code, ex.Signal, sweep.LastLine(errb.Bytes()))
	}
	s.cpu, s.maxRSS, s.read = controls+cpuSeconds(&ex.Rusage), ex.Rusage.Maxrss, ex.Rusage.Inblock*512
	return s, out.Bytes(), errb.Bytes(), nil
}

// threadCPU runs fn locked to the calling goroutine's thread and adds the CPU (user+sys)
// the thread spent in it to *sum.
func threadCPU(sum *float64, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var before, after unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &before); err != nil {
		return fmt.Errorf("getrusage: %w", err)
	}
	err := fn()
	if rerr := unix.Getrusage(unix.RUSAGE_THREAD, &after); rerr != nil {
		return errors.Join(err, fmt.Errorf("getrusage: %w", rerr))
	}
	*sum += time.Duration(unix.TimevalToNsec(after.Utime) + unix.TimevalToNsec(after.Stime) -
		unix.TimevalToNsec(before.Utime) - unix.TimevalToNsec(before.Stime)).Seconds()
	return err
}

// traced runs llama-bench under iocorr record --no-ingest. wait4's rusage
// of iocorr includes the command it waited for; the recorder's own peak
// RSS is in meta.json (Recorder reads it).
func traced(cfg Config, model string, a Arm, dir string) (sample, error) {
	s := sample{dir: dir}
	args := []string{"record", "-f", "-o", dir, "--no-ingest"}
	if a.Probe != "" {
		args = append(args, "--probe", a.Probe)
	}
	if a.Cold {
		args = append(args, "--cold", "--mem-limit", strconv.FormatInt(cfg.MemLimit, 10))
	}
	cmd := exec.Command(cfg.Iocorr, append(append(args, "--"), a.argv(cfg, model)...)...)
	if len(a.Env) > 0 {
		cmd.Env = append(os.Environ(), a.Env...)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return s, fmt.Errorf("iocorr record: %w: %s", err, sweep.LastLine(errb.Bytes()))
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	s.cpu, s.read = cpuSeconds(ru), ru.Inblock*512
	var err error
	s.tokPerS, err = a.tokensPerSecond(out.Bytes())
	return s, err
}

// hybridSetUp readies a hybrid arm: its tools' directory, the environment
// lavapipe needs (set in this process, which both modes' commands
// inherit, until restore), and one untraced run first, so that no round
// pays lavapipe's first compilation of ggml's shaders (a minute) when
// Mesa's cache is cold.
func hybridSetUp(cfg Config, model string, a *Arm) (restore func(), err error) {
	if a.hybridDir, err = llmtest.HybridBin(); err != nil {
		return nil, err
	}
	var undo []func()
	restore = func() {
		for _, u := range undo {
			u()
		}
	}
	for _, kv := range llmtest.HybridEnv() {
		k, v, _ := strings.Cut(kv, "=")
		if old, had := os.LookupEnv(k); had {
			undo = append(undo, func() { os.Setenv(k, old) })
		} else {
			undo = append(undo, func() { os.Unsetenv(k) })
		}
		os.Setenv(k, v)
	}
	if _, err := untraced(cfg, model, *a); err != nil {
		restore()
		return nil, fmt.Errorf("the warm-up run: %w", err)
	}
	return restore, nil
}

// Overhead runs the arm's rounds and adds its figures. Each round runs
// untraced, traced and (with Floor) the bpftrace floor, in an order that
// rotates from round to round, so that drift of the machine falls on
// every mode alike; the ratios are taken within a round.
func Overhead(r *Report, cfg Config, model string, a Arm) {
	sec := "overhead " + a.Name
	var tok, cpu, read, floorCPU, floorTok, stolen []float64
	var runs []sample
	var floorNA, stolenNA string
	floor := a.Floor
	if floor {
		if _, err := exec.LookPath("bpftrace"); err != nil {
			floor, floorNA = false, "bpftrace not found"
		}
	}
	if a.Driver {
		if err := llmtest.Installed(); err != nil {
			r.NA(sec, "tokens/s traced/untraced", "ratio", orNA(err))
			return
		}
	}
	if a.Hybrid {
		restore, err := hybridSetUp(cfg, model, &a)
		if err != nil {
			r.NA(sec, "tokens/s traced/untraced", "ratio", orNA(err))
			return
		}
		defer restore()
	}
	if !a.Cold {
		// An arm in RAM after a cold one would find the model evicted
		// in its first round.
		if err := warm(model); err != nil {
			r.NA(sec, "tokens/s traced/untraced", "ratio", orNA(err))
			return
		}
	}
	var script string
	for i := 0; i < cfg.Pairs; i++ {
		var u, t, f sample
		var err error
		before, herr := readHostCPU()
		modes := []string{"untraced", "traced"}
		if floor {
			modes = append(modes, "floor")
		}
		for k := range modes {
			m := modes[(i+k)%len(modes)]
			switch m {
			case "untraced":
				u, err = untraced(cfg, model, a)
			case "traced":
				dir := filepath.Join(cfg.WorkDir, strings.ReplaceAll(a.Name, " ", "-")+fmt.Sprintf("-%d", i))
				t, err = traced(cfg, model, a, dir)
			case "floor":
				// Round 0 runs floor after traced: the floor attaches
				// where that run attached.
				if script == "" {
					if script, err = floorScript(t.dir); err != nil {
						break
					}
				}
				f, err = bpftraceFloor(cfg, model, a, script)
			}
			if err != nil {
				logf(cfg, "%s round %d %s: %v", a.Name, i, m, err)
				if m == "floor" {
					floor, floorNA = false, orNA(err)
					err = nil
					continue
				}
				break
			}
		}
		if err != nil {
			r.NA(sec, "tokens/s traced/untraced", "ratio", orNA(err))
			return
		}
		steal := "steal NA"
		if share, err := stolenSince(before, herr); err == nil {
			stolen = append(stolen, share)
			steal = fmt.Sprintf("steal %.0f%%", 100*share)
		} else {
			stolenNA = err.Error()
		}
		logf(cfg, "%s round %d: untraced %.2f tok/s %.2f s CPU, traced %.2f tok/s %.2f s CPU, %s", a.Name, i, u.tokPerS, u.cpu, t.tokPerS, t.cpu, steal)
		tok = append(tok, t.tokPerS/u.tokPerS)
		cpu = append(cpu, t.cpu/u.cpu)
		if u.read >= minRead {
			read = append(read, float64(t.read)/float64(u.read))
		}
		if floor && f.cpu > 0 {
			floorCPU = append(floorCPU, f.cpu/u.cpu)
			floorTok = append(floorTok, f.tokPerS/u.tokPerS)
		}
		runs = append(runs, t)
	}
	r.Add(sec, "tokens/s traced/untraced", "ratio", tok, "")
	switch {
	case a.Cold && a.Probe == "":
		r.goal(">=", 0.98, "median")
	case a.Probe == "":
		r.goal(">=", 0.98, "median")
	}
	r.Add(sec, "CPU traced/untraced (user+sys, child+recorder)", "ratio", cpu, "")
	if a.Cold && a.Probe == "" {
		r.goal("<=", 1.05, "median")
	}
	// The arms are alike only if both read alike: the same limit and
	// eviction give the same I/O.
	r.Add(sec, "disk reads traced/untraced (rusage inblock)", "ratio", read, "the untraced runs read under 64 MiB from the disk (in RAM)")
	if a.Floor {
		r.Add(sec, "CPU bpftrace floor/untraced", "ratio", floorCPU, floorNA)
		r.Add(sec, "tokens/s bpftrace floor/untraced", "ratio", floorTok, floorNA)
		// Issue 18: the default tier within 1.02 of the floor of its own
		// hooks, judged as tokens/s traced over the floor's, round by round.
		var vsFloor []float64
		if len(floorTok) == len(tok) {
			for i := range tok {
				vsFloor = append(vsFloor, tok[i]/floorTok[i])
			}
		}
		r.Add(sec, "tokens/s traced/bpftrace floor", "ratio", vsFloor, "the floor was not measured")
		if a.Probe == "" {
			r.goal(">=", 1/1.02, "median")
		}
		var added []float64
		if len(floorCPU) == len(cpu) {
			for i := range cpu {
				if floorCPU[i] > 1 {
					added = append(added, (cpu[i]-1)/(floorCPU[i]-1))
				}
			}
		}
		r.Add(sec, "added CPU iocorr/floor ((traced-1)/(floor-1))", "ratio", added, "floor added no CPU or was not measured")
		r.goal("<=", 1.5, "median")
	}
	// A round whose CPUs the hypervisor gave to other guests measures
	// the host: its ratios are as noisy as that share.
	if len(stolen) < len(tok) {
		stolen = nil
	}
	r.Add(sec, "host CPU time stolen by other guests during a round (/proc/stat steal)", "share", stolen, stolenNA)
	Recorder(r, cfg, sec, runs)
}

// diskRead is the bytes read from the model's disk during the run, from
// the diskstats iocorr record read before and after it.
func diskRead(m *rundir.Meta) (uint64, bool) {
	if len(m.Models) == 0 {
		return 0, false
	}
	disk := blockdev.DiskName(m.Models[0].Block)
	var before, after uint64
	var okB, okA bool
	for _, d := range m.DiskBefore {
		if d.Name == disk {
			before, okB = d.SectorsRead, true
		}
	}
	for _, d := range m.DiskAfter {
		if d.Name == disk {
			after, okA = d.SectorsRead, true
		}
	}
	return (after - before) * 512, okB && okA && after >= before
}

// ProbeSetExists says whether iocorr record offers --probe set, from its
// help: arm (d) runs only where it does.
func ProbeSetExists(iocorr, set string) bool {
	out, _ := exec.Command(iocorr, "record", "--help").CombinedOutput()
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "--probe") && strings.Contains(line, set) {
			return true
		}
	}
	return false
}

// warm reads the whole model into the page cache.
func warm(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(io.Discard, f); err != nil {
		return fmt.Errorf("reading %s into the page cache: %w", path, err)
	}
	return nil
}
