package bench

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/iocorr/iocorr/rundir"
)

// floorScript is a bpftrace program on the probes a recorded run attached
// (its meta.json lists them), the kernel's and the user-space ones on
// llama.cpp, each only counting into a map: the least any tracer of
// those events costs. A uprobe's trap is most of what one costs, and it
// is the same whatever the program does: a floor without them would
// count iocorr's uprobes as its own excess.
func floorScript(runDir string) (string, error) {
	m, err := rundir.ReadMeta(runDir)
	if err != nil {
		return "", err
	}
	seen := map[string]bool{}
	for _, p := range m.Probes {
		if p.Error != "" {
			continue
		}
		var spec string
		switch p.Kind {
		case "tracepoint":
			spec = "tracepoint:" + strings.Replace(p.Target, "/", ":", 1)
		case "tp_btf":
			// A BTF tracepoint is named without its category.
			spec = "tracepoint:*:" + p.Target
		case "perf_event":
			switch p.Target {
			case "page-faults-major":
				spec = "software:major-faults:1"
			case "page-faults-minor":
				spec = "software:minor-faults:1"
			default:
				return "", fmt.Errorf("no bpftrace equivalent of perf event %s", p.Target)
			}
		case "uprobe", "uretprobe":
			// Quoted: a library's path may hold what bpftrace would parse.
			spec = fmt.Sprintf("%s:%q:%s", p.Kind, p.Target, p.Symbol)
		case "uprobe_multi":
			return "", fmt.Errorf("no bpftrace floor of the op probes (%s in %s)", p.Symbol, p.Target)
		default:
			continue // not a probe of its own (a capability's NA)
		}
		seen[spec] = true
	}
	if len(seen) == 0 {
		return "", fmt.Errorf("%s attached no probe", runDir)
	}
	specs := make([]string, 0, len(seen))
	for s := range seen {
		specs = append(specs, s)
	}
	sort.Strings(specs)
	// One block per probe, keyed by a literal: bpftrace 0.17 generates
	// no code for its probe builtin on software events, and refuses a
	// string literal over 64 bytes (a library's path is longer).
	var b strings.Builder
	for i, s := range specs {
		fmt.Fprintf(&b, "%s { @n[\"p%d\"] = count(); }\n", s, i)
	}
	b.WriteString("END { clear(@n); }\n")
	return b.String(), nil
}

// bpftraceFloor runs llama-bench untraced while bpftrace counts the
// script's probes; the CPU is the child's plus bpftrace's.
func bpftraceFloor(cfg Config, model string, cold bool, script string) (sample, error) {
	var s sample
	cmd := exec.Command("bpftrace", "-e", script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return s, err
	}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		return s, err
	}
	// bpftrace's first line is "Attaching N probes...".
	attached := make(chan error, 1)
	go func() {
		rd := bufio.NewReader(stdout)
		line, err := rd.ReadString('\n')
		if err != nil {
			attached <- fmt.Errorf("bpftrace: %w: %s", err, errb.String())
			return
		}
		if !strings.HasPrefix(line, "Attaching") {
			attached <- fmt.Errorf("bpftrace said %q", line)
			return
		}
		attached <- nil
		io.Copy(io.Discard, rd)
	}()
	select {
	case err = <-attached:
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("bpftrace did not attach in 60 s")
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return s, err
	}
	// It prints that line before it attaches, and says nothing after.
	time.Sleep(2 * time.Second)
	s, runErr := untraced(cfg, model, cold)
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		return s, fmt.Errorf("bpftrace: %w: %s", err, lastLine([]byte(errb.String())))
	}
	if runErr != nil {
		return s, runErr
	}
	s.cpu += cpuSeconds(cmd.ProcessState.SysUsage().(*syscall.Rusage))
	return s, nil
}
