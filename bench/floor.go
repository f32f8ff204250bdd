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

// bpftraceRun is a bpftrace that has attached its script's probes.
type bpftraceRun struct {
	cmd    *exec.Cmd
	stderr *strings.Builder
}

// startBpftrace starts bpftrace on script and returns once its probes are
// attached; an error names what bpftrace said last.
func startBpftrace(script string) (*bpftraceRun, error) {
	cmd := exec.Command("bpftrace", "-e", script)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	run := &bpftraceRun{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = run.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	// bpftrace's first line is "Attaching N probes...".
	attached := make(chan error, 1)
	go func() {
		rd := bufio.NewReader(stdout)
		line, err := rd.ReadString('\n')
		switch {
		case err != nil:
			attached <- fmt.Errorf("bpftrace: %w", err)
			return
		case !strings.HasPrefix(line, "Attaching"):
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
		return nil, fmt.Errorf("%w: %s", err, bpftraceError(run.stderr.String()))
	}
	// It prints that line before it attaches, and says nothing after.
	time.Sleep(2 * time.Second)
	return run, nil
}

// bpftraceError is the last line of bpftrace's stderr that holds
// "ERROR:", its own words (around them: warnings, the source it quotes
// and underlines), or its last line.
func bpftraceError(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "ERROR:") && !strings.Contains(lines[i], "RLIMIT_MEMLOCK") {
			return strings.TrimSpace(lines[i])
		}
	}
	return lines[len(lines)-1]
}

// stop ends bpftrace with SIGINT, as Ctrl-C does, and waits for it.
func (b *bpftraceRun) stop() error {
	b.cmd.Process.Signal(syscall.SIGINT)
	if err := b.cmd.Wait(); err != nil {
		return fmt.Errorf("bpftrace: %w: %s", err, bpftraceError(b.stderr.String()))
	}
	return nil
}

// bpftraceFloor runs the arm's command untraced while bpftrace counts the
// script's probes; the CPU is the child's plus bpftrace's.
func bpftraceFloor(cfg Config, model string, a Arm, script string) (sample, error) {
	var s sample
	bt, err := startBpftrace(script)
	if err != nil {
		return s, err
	}
	s, runErr := untraced(cfg, model, a)
	if err := bt.stop(); err != nil {
		return s, err
	}
	if runErr != nil {
		return s, runErr
	}
	s.cpu += cpuSeconds(bt.cmd.ProcessState.SysUsage().(*syscall.Rusage))
	return s, nil
}
