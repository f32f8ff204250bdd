package main

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
)

func init() {
	register(&command{
		name:    "doctor",
		summary: "check that this machine can record, and what a command offers to probe",
		usage:   "[--lib PATH] [-- CMD [ARGS...]]",
		flags:   doctorFlags,
	})
}

// tracepoints the tracer attaches (classic ones by tracefs path; the
// tp_btf ones exist as tracepoints too).
var doctorTracepoints = []string{
	"exceptions/page_fault_user",
	"filemap/mm_filemap_fault", "filemap/mm_filemap_add_to_page_cache", "filemap/mm_filemap_delete_from_page_cache",
	"readahead/page_cache_sync_ra", "readahead/page_cache_async_ra", "readahead/page_cache_ra_unbounded", "readahead/page_cache_ra_order",
	"block/block_rq_issue", "block/block_rq_complete",
	"sched/sched_process_fork", "sched/sched_process_exec", "sched/sched_process_exit",
	"syscalls/sys_exit_mmap",
}

type check struct {
	name     string
	ok       bool
	required bool
	detail   string
}

func doctorFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	var libs []string
	fs.StringArrayVar(&libs, "lib", nil, "also look for probe symbols in this file (repeatable)")
	format := formatFlag(fs)
	return func(ctx context.Context, args []string) error {
		checks := machineChecks()
		if len(args) > 0 {
			checks = append(checks, commandChecks(args, libs)...)
		}
		rw := newResultWriter(stdout, *format, []column{{Name: "check"}, {Name: "status"}, {Name: "detail"}})
		failed := false
		for _, c := range checks {
			status := "ok"
			if !c.ok {
				status = "MISSING"
				if c.required {
					status = "FAIL"
					failed = true
				}
			}
			rw.Row(txt(c.name), txt(status), txt(c.detail))
		}
		if err := rw.Close(); err != nil {
			return err
		}
		if failed {
			fmt.Fprintln(stderr, "iocorr: doctor: required checks failed; record will not work here")
			return exitError{1}
		}
		return nil
	}
}

func machineChecks() []check {
	var out []check
	add := func(name string, ok, required bool, detail string) {
		out = append(out, check{name: name, ok: ok, required: required, detail: detail})
	}
	capOK, capDetail := bpfCapabilities()
	add("privileges", capOK, true, capDetail)
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	add("kernel BTF", err == nil, true, "/sys/kernel/btf/vmlinux")
	_, err = os.Stat("/sys/bus/event_source/devices/uprobe")
	add("uprobes", err == nil, true, "/sys/bus/event_source/devices/uprobe")

	tracefs := "/sys/kernel/tracing"
	_, err = os.Stat(filepath.Join(tracefs, "events"))
	add("tracefs", err == nil, false, map[bool]string{true: tracefs, false: "not mounted: mount -t tracefs nodev " + tracefs}[err == nil])
	if err == nil {
		for _, tp := range doctorTracepoints {
			_, err := os.Stat(filepath.Join(tracefs, "events", tp))
			add("tracepoint "+tp, err == nil, true, "")
		}
	}
	for _, ev := range []struct {
		name   string
		config uint64
	}{{"perf page-faults-major", unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ}, {"perf page-faults-minor", unix.PERF_COUNT_SW_PAGE_FAULTS_MIN}} {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: ev.config, Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: 1, Bits: unix.PerfBitDisabled}
		fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		add(ev.name, err == nil, true, errText(err))
	}
	// The decisive check: load every program and attach the kernel side.
	if capOK {
		tr, err := bpf.Open(bpf.Options{RingBufBytes: 1 << 20})
		if err == nil {
			tr.Close()
		}
		add("BPF programs load and attach", err == nil, true, errText(err))
	}

	v2 := ""
	for _, root := range []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"} {
		if b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers")); err == nil && strings.Contains(" "+string(b)+" ", " memory") {
			v2 = root
		}
	}
	_, v1err := os.Stat("/sys/fs/cgroup/memory/memory.limit_in_bytes")
	add("memory cgroup v2", v2 != "", false, v2)
	add("memory cgroup v1", v1err == nil, false, "/sys/fs/cgroup/memory")
	if v2 == "" && v1err != nil {
		out[len(out)-1].detail = "no memory controller: --mem-limit will not work"
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
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return os.Geteuid() == 0, "uid " + strconv.Itoa(os.Geteuid())
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			capEff, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			const capSysAdmin, capPerfmon, capBPF = 21, 38, 39
			has := func(c uint) bool { return capEff&(1<<c) != 0 }
			if has(capSysAdmin) || (has(capBPF) && has(capPerfmon)) {
				return true, fmt.Sprintf("uid %d, CapEff %s", os.Geteuid(), strings.TrimSpace(v))
			}
			return false, fmt.Sprintf("uid %d lacks CAP_BPF+CAP_PERFMON (or CAP_SYS_ADMIN): run as root", os.Geteuid())
		}
	}
	return os.Geteuid() == 0, "uid " + strconv.Itoa(os.Geteuid())
}

// commandChecks says which probe symbols the command's files define: the
// executable, the libraries it links, --lib files, and llama.cpp builds
// shipped in node_modules next to a Node script.
func commandChecks(argv, libs []string) []check {
	var files []string
	exe, err := lookPath(argv[0])
	if err != nil {
		return []check{{name: "command " + argv[0], required: true, detail: err.Error()}}
	}
	files = append(files, exe)
	files = append(files, neededLibs(exe)...)
	files = append(files, libs...)
	for _, a := range argv[1:] {
		if strings.HasSuffix(a, ".js") || strings.HasSuffix(a, ".mjs") || strings.HasSuffix(a, ".cjs") {
			files = append(files, nodeLlamaLibs(filepath.Dir(a))...)
		}
	}
	var out []check
	found := map[string]bool{}
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f] {
			continue
		}
		seen[f] = true
		probe, ops, _, err := bpf.FileSymbols(f)
		if err != nil || (len(probe) == 0 && len(ops) == 0) {
			continue
		}
		for _, s := range probe {
			found[s] = true
		}
		out = append(out, check{name: "symbols in " + f, ok: true,
			detail: fmt.Sprintf("%s; %d ggml_compute_forward_* (op probes)", strings.Join(probe, ", "), len(ops))})
	}
	for _, s := range bpf.ProbeSymbols {
		c := check{name: "probe " + s, ok: found[s]}
		if !found[s] {
			c.detail = fmt.Sprintf("not found in %d files searched (a library loaded at run time is probed when it is mapped)", len(seen))
		}
		out = append(out, c)
	}
	return out
}

// neededLibs resolves DT_NEEDED entries the way the dynamic loader would
// for the common cases: RUNPATH/RPATH ($ORIGIN), then the system paths.
func neededLibs(path string) []string {
	f, err := elf.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	needed, _ := f.ImportedLibraries()
	var dirs []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				dirs = append(dirs, strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(path)))
			}
		}
	}
	dirs = append(dirs, "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib")
	var out []string
	for _, n := range needed {
		for _, d := range dirs {
			p := filepath.Join(d, n)
			if _, err := os.Stat(p); err == nil {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// nodeLlamaLibs finds the llama.cpp libraries node-llama-cpp ships, in
// node_modules at or above dir.
func nodeLlamaLibs(dir string) []string {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	for d := abs; ; d = filepath.Dir(d) {
		matches, _ := filepath.Glob(filepath.Join(d, "node_modules", "@node-llama-cpp", "*", "bins", "*", "*.so"))
		if len(matches) > 0 {
			sort.Strings(matches)
			return matches
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
