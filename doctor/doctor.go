// Package doctor checks that this machine can record and says what a
// command offers to probe. It returns the checks as data (Check); the
// command prints them.
package doctor

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/elfinfo"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/tracefs"
	"github.com/iocorr/iocorr/rundir"
)

// Status is a check's outcome.
type Status string

const (
	OK       Status = "ok"
	Fallback Status = "fallback" // the primary way is not here; record takes another, its detail says what is lost
	Missing  Status = "missing"  // not here, and record does without it
	Fail     Status = "fail"     // not here, and record needs it
)

// Check is one thing doctor looked at.
type Check struct {
	Name   string
	Status Status
	// Detail says where it was found, or what is missing and what that
	// costs; a failed check's begins "required".
	Detail string
}

// Targets are what doctor looks at besides the machine.
type Targets struct {
	// Command is a command line whose executable, libraries and (for a
	// Node script) node-llama-cpp build are searched for probe points.
	Command []string
	// Libs are more files to search.
	Libs []string
}

// Run makes every check: the machine's, then, with a command or
// libraries to search, the probe points they define.
func Run(o Targets) []Check {
	checks := append(machineChecks(), gpuChecks(o.Command)...)
	if len(o.Command) > 0 || len(o.Libs) > 0 {
		checks = append(checks, commandChecks(o.Command, o.Libs)...)
	}
	out := make([]Check, len(checks))
	for i, c := range checks {
		out[i] = c.result()
	}
	return out
}

// result is the check as Run returns it: a failed check that record
// needs fails, and its detail says it is required.
func (c check) result() Check {
	switch {
	case c.ok && c.fallback:
		return Check{Name: c.name, Status: Fallback, Detail: c.detail}
	case c.ok:
		return Check{Name: c.name, Status: OK, Detail: c.detail}
	case c.required:
		return Check{Name: c.name, Status: Fail, Detail: strings.TrimSuffix("required: "+c.detail, ": ")}
	}
	return Check{Name: c.name, Status: Missing, Detail: c.detail}
}

// Failed reports whether a check that record needs failed.
func Failed(checks []Check) bool {
	return slices.ContainsFunc(checks, func(c Check) bool { return c.Status == Fail })
}

// check is a check as it is made: whether it passed and whether record
// needs it.
type check struct {
	name     string
	ok       bool
	required bool
	// fallback is set on a passed check that took a lesser way.
	fallback bool
	detail   string
}

// capabilityChecks is the capability table of bpf (the one the tracer
// chooses its programs from) as this kernel answers it: per capability,
// the path record takes, the kernel that path needs and what is lost.
func capabilityChecks(caps []bpf.CapStatus, err error) []check {
	if err != nil {
		return []check{{name: "capabilities", required: true, detail: err.Error()}}
	}
	var out []check
	for _, c := range caps {
		ch := check{name: "capability " + c.Name, required: c.Required}
		var parts []string
		switch {
		case c.NA():
			parts = append(parts, "NA: "+c.Lost, "needs kernel "+c.Kernel)
		default:
			ch.ok, ch.fallback = true, !c.Primary
			parts = append(parts, c.Path, "kernel "+c.Kernel)
			if c.Lost != "" {
				parts = append(parts, "loses "+c.Lost)
			}
		}
		if c.Why != "" {
			parts = append(parts, "because "+c.Why)
		}
		ch.detail = strings.Join(parts, "; ")
		out = append(out, ch)
	}
	return out
}

func machineChecks() []check {
	var out []check
	add := func(name string, ok, required bool, detail string) {
		out = append(out, check{name: name, ok: ok, required: required, detail: detail})
	}
	capOK, capDetail := bpfCapabilities()
	add("privileges", capOK, true, capDetail)
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	add("kernel BTF", err == nil, true, map[bool]string{true: "/sys/kernel/btf/vmlinux", false: "no /sys/kernel/btf/vmlinux: the kernel needs CONFIG_DEBUG_INFO_BTF"}[err == nil])
	_, err = os.Stat("/sys/bus/event_source/devices/uprobe")
	add("uprobes", err == nil, true, map[bool]string{true: "/sys/bus/event_source/devices/uprobe", false: "no uprobe event source: the kernel needs CONFIG_UPROBE_EVENTS"}[err == nil])

	// As record does: mount tracefs when it is missing and doctor may.
	if dir, mounted, err := tracefs.Ensure(); err != nil {
		add("tracefs", false, true, err.Error())
	} else if mounted {
		add("tracefs", true, true, dir+" (it was not mounted: mounted it now)")
	} else {
		add("tracefs", true, true, dir)
	}
	out = append(out, capabilityChecks(bpf.Detect(bpf.DetectOptions{Probes: rundir.ProbeSet{Ops: true, Sched: true, PageCache: true}}))...)
	// The decisive check: load every program and attach the kernel side.
	if capOK {
		tr, err := bpf.Open(bpf.Options{RingBufBytes: 1 << 20})
		if err == nil {
			tr.Close()
		}
		add("BPF programs load and attach", err == nil, true, errText(err))
		// The optional tiers load programs of their own, which a kernel's
		// verifier may refuse where the default ones pass (6.1 refused a
		// page-cache program's stack): say so before a record asks.
		tr, err = bpf.Open(bpf.Options{RingBufBytes: 1 << 20, Probes: rundir.ProbeSet{PageCache: true, Sched: true}})
		if err == nil {
			tr.Close()
		}
		add("BPF programs of --probe pagecache,sched load", err == nil, false, errText(err))
		add("uprobe hit cost", true, false, uprobeCostText())
	}

	v2, v1 := cgroup.MemoryControllers()
	switch {
	case v2 != "":
		add("memory cgroup v2", true, false, v2+" (--mem-limit uses it)")
	case v1:
		add("memory cgroup v2", false, false, "no memory controller in the unified hierarchy; --mem-limit uses v1")
	default:
		add("memory cgroup v2", false, false, "no memory controller in the unified hierarchy")
	}
	switch {
	case v1 && v2 != "":
		add("memory cgroup v1", true, false, "/sys/fs/cgroup/memory (v2 is preferred)")
	case v1:
		add("memory cgroup v1", true, false, "/sys/fs/cgroup/memory (--mem-limit uses it)")
	case v2 != "":
		add("memory cgroup v1", false, false, "not mounted; not needed")
	default:
		add("memory cgroup v1", false, false, "not mounted: --mem-limit will not work")
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// bpfCapabilities reports whether the process may load tracing programs:
// root, or CAP_BPF with CAP_PERFMON (kernel 5.8+).
func bpfCapabilities() (bool, string) {
	if v, ok := proc.StatusField("self", "CapEff"); ok {
		capEff, _ := strconv.ParseUint(v, 16, 64)
		const capSysAdmin, capPerfmon, capBPF = 21, 38, 39
		has := func(c uint) bool { return capEff&(1<<c) != 0 }
		if has(capSysAdmin) || (has(capBPF) && has(capPerfmon)) {
			return true, fmt.Sprintf("uid %d, CapEff %s", os.Geteuid(), v)
		}
		return false, fmt.Sprintf("uid %d lacks CAP_BPF+CAP_PERFMON (or CAP_SYS_ADMIN): run as root", os.Geteuid())
	}
	return os.Geteuid() == 0, "uid " + strconv.Itoa(os.Geteuid())
}

// commandChecks says which probe symbols the command's files define: the
// executable and the libraries it links (recursively), --lib files, and
// the llama.cpp build node-llama-cpp ships when the command runs a Node
// script.
func commandChecks(argv, libs []string) []check {
	var files []string
	var out []check
	if len(argv) > 0 {
		exe, err := exec.LookPath(argv[0])
		if err == nil {
			exe, err = filepath.Abs(exe)
		}
		if err != nil {
			return []check{{name: "command " + argv[0], required: true, detail: err.Error()}}
		}
		files = append(files, exe)
		files = append(files, elfinfo.NeededLibs(exe)...)
		if dirs := nodeScriptDirs(argv[1:]); len(dirs) > 0 {
			addons := nodeLlamaAddons(dirs)
			if len(addons) == 0 {
				out = append(out, check{name: "node-llama-cpp", detail: "no llama-addon.node under node_modules at or above " + strings.Join(dirs, ", ")})
			}
			for _, a := range addons {
				out = append(out, check{name: "node-llama-cpp", ok: true, detail: a})
				files = append(files, a)
				files = append(files, elfinfo.NeededLibs(a)...)
			}
		}
	}
	for _, l := range libs {
		files = append(files, l)
		files = append(files, elfinfo.NeededLibs(l)...)
	}
	files = withBackendVariants(files)

	type hit struct {
		path, detail string
	}
	var hits []hit
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f] {
			continue
		}
		seen[f] = true
		syms, err := ggml.FileSymbols(f)
		if err != nil || (len(syms.Probe) == 0 && len(syms.Ops) == 0) {
			continue
		}
		hits = append(hits, hit{f, fmt.Sprintf("%s + %d ggml_compute_forward_* op functions", strings.Join(syms.Probe, ", "), len(syms.Ops))})
	}
	// The CPU backend comes in a dozen variants of which one is loaded:
	// one line for all of them.
	variants := map[string][]string{}
	for _, h := range hits {
		if isCPUVariant(h.path) {
			k := filepath.Dir(h.path) + "\x00" + h.detail
			variants[k] = append(variants[k], filepath.Base(h.path))
		}
	}
	for _, h := range hits {
		name, where := "symbols in "+filepath.Base(h.path), shortPath(filepath.Dir(h.path))
		if isCPUVariant(h.path) {
			k := filepath.Dir(h.path) + "\x00" + h.detail
			vs := variants[k]
			if len(vs) == 0 {
				continue // already shown
			}
			delete(variants, k)
			if len(vs) > 1 {
				name = fmt.Sprintf("symbols in libggml-cpu-*.so (%d variants, one is loaded at run time)", len(vs))
			}
		}
		out = append(out, check{name: name, ok: true, detail: h.detail + ", in " + where})
	}
	return append(out, probePointChecks(slices.Sorted(maps.Keys(seen)))...)
}

// probePointChecks says, per probe point, in which of files it is and how
// bound (global, or local: in .symtab only), or that it is missing and
// what a run loses without it (ggml.LostWithout).
func probePointChecks(files []string) []check {
	where := map[string][]place{}
	var globalOps, localOps int
	var opFiles []place
	for _, f := range files {
		points, g, l, err := ggml.ProbePoints(f)
		if err != nil {
			continue
		}
		for _, p := range points {
			where[p.Symbol] = append(where[p.Symbol], place{p.Binding, filepath.Base(f)})
		}
		if g > 0 {
			globalOps += g
			opFiles = append(opFiles, place{"", filepath.Base(f)})
		}
		localOps += l
	}
	var out []check
	for _, s := range ggml.ProbeSymbols {
		c := check{name: "probe point " + s, ok: len(where[s]) > 0}
		if c.ok {
			c.detail = summarizeWhere(where[s])
		} else {
			c.detail = fmt.Sprintf("missing from the %d files searched: %s (a library loaded at run time is probed when it is mapped; name it with --lib)",
				len(files), ggml.LostWithout(s))
		}
		out = append(out, c)
	}
	c := check{name: "probe point " + ggml.OpFunctions + " (--probe ops)", ok: globalOps > 0}
	switch {
	case globalOps > 0:
		c.detail = fmt.Sprintf("%d global functions in %s", globalOps, summarizeWhere(opFiles))
	default:
		c.detail = "missing: " + ggml.LostWithout(ggml.OpFunctions)
	}
	if localOps > 0 {
		c.detail += fmt.Sprintf("; %d more are local (not probed)", localOps)
	}
	return append(out, c)
}

// place is where a probe point was found: its binding ("" when it goes
// without saying) and file.
type place struct{ bind, file string }

// summarizeWhere joins places, one entry for the many CPU-backend
// variants that define the same symbols.
func summarizeWhere(places []place) string {
	var out []string
	variants := map[string]int{}
	for _, p := range places {
		if isCPUVariant(p.file) {
			variants[p.bind]++
			continue
		}
		out = append(out, strings.TrimSpace(p.bind+" in "+p.file))
	}
	for _, bind := range slices.Sorted(maps.Keys(variants)) {
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s in %d libggml-cpu-*.so variants (one is loaded at run time)", bind, variants[bind])))
	}
	return strings.Join(out, ", ")
}

func isCPUVariant(p string) bool {
	b := filepath.Base(p)
	return strings.HasPrefix(b, "libggml-cpu") && strings.HasSuffix(b, ".so")
}

// shortPath shows a path relative to the working directory when it is
// below it.
func shortPath(p string) string {
	wd, err := os.Getwd()
	if err != nil {
		return p
	}
	if rel, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(rel, "..") {
		return rel
	}
	return p
}

// withBackendVariants adds the CPU backends a ggml built with dynamic
// backends dlopen()s at run time from beside its libraries: they are in
// no DT_NEEDED list.
func withBackendVariants(files []string) []string {
	out := append([]string(nil), files...)
	dirs := map[string]bool{}
	for _, f := range files {
		if b := filepath.Base(f); strings.HasPrefix(b, "libggml") || strings.HasPrefix(b, "libllama") {
			dirs[filepath.Dir(f)] = true
		}
	}
	for d := range dirs {
		m, _ := filepath.Glob(filepath.Join(d, "libggml-cpu*.so"))
		sort.Strings(m)
		out = append(out, m...)
	}
	return out
}

// nodeScriptDirs are where to look for node_modules when the command runs
// Node: the directories of script arguments and the working directory.
func nodeScriptDirs(args []string) []string {
	var dirs []string
	for _, a := range args {
		for _, ext := range []string{".js", ".mjs", ".cjs", ".ts"} {
			if strings.HasSuffix(a, ext) {
				if abs, err := filepath.Abs(filepath.Dir(a)); err == nil {
					dirs = append(dirs, abs)
				}
			}
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	if wd, err := os.Getwd(); err == nil {
		dirs = append(dirs, wd)
	}
	return dirs
}

// nodeLlamaAddons finds node-llama-cpp's llama-addon.node in node_modules
// at or above the given directories: the prebuilt packages and local
// builds.
func nodeLlamaAddons(dirs []string) []string {
	patterns := []string{
		"@node-llama-cpp/*/bins/*/llama-addon.node",
		"node-llama-cpp/bins/*/llama-addon.node",
		"node-llama-cpp/llama/localBuilds/*/Release/llama-addon.node",
	}
	var out []string
	seen := map[string]bool{}
	for _, start := range dirs {
		for d := start; ; d = filepath.Dir(d) {
			for _, p := range patterns {
				m, _ := filepath.Glob(filepath.Join(d, "node_modules", p))
				sort.Strings(m)
				for _, a := range m {
					if !seen[a] {
						seen[a] = true
						out = append(out, a)
					}
				}
			}
			if d == filepath.Dir(d) {
				break
			}
		}
	}
	return out
}

// uprobeCostText measures what one uprobe hit costs here, on the
// compilers' usual prologue (which the kernel may emulate; iocorr probes
// it past a CET build's endbr64) and on an instruction stepped out of
// line, and says what that means for --probe ops (one hit per op per
// compute thread).
func uprobeCostText() string {
	var c [2]bpf.UprobeCost
	for _, first := range []bpf.FirstInstruction{bpf.Emulated, bpf.Stepped} {
		var err error
		if c[first], err = bpf.MeasureUprobeCost(2000, 3, first); err != nil {
			return "NA: could not be measured: " + err.Error()
		}
	}
	return fmt.Sprintf("%s per hit here on a push, where llama.cpp's functions are probed (past a CET build's endbr64) (rounds %s–%s), %s on an instruction stepped out of line (rounds %s–%s); bare metal: %s–%s; --probe ops pays one per op per compute thread, the default probes a few per token and graph",
		c[bpf.Emulated].PerHit, c[bpf.Emulated].Min, c[bpf.Emulated].Max, c[bpf.Stepped].PerHit, c[bpf.Stepped].Min, c[bpf.Stepped].Max,
		bpf.BareMetalUprobeCost[0], bpf.BareMetalUprobeCost[1])
}
