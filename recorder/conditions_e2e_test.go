package recorder_test

import (
	"bytes"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// conditionFiles are what the kernel says of a process's conditions that
// its parent's launch decides: its credentials, signal mask and ignored
// signals, CPU and memory affinity, capabilities, rlimits, cgroups,
// niceness and scheduling policy, process group and session, autogroup,
// timer slack and environment. cat prints them of itself; the
// environment last, as it ends in no newline.
var conditionFiles = []string{"/proc/self/status", "/proc/self/limits", "/proc/self/cgroup", "/proc/self/stat",
	"/proc/self/autogroup", "/proc/self/timerslack_ns", "/proc/self/environ"}

// statusConditions are the lines of /proc/PID/status a launch decides.
var statusConditions = regexp.MustCompile(`^(Umask|Uid|Gid|Groups|SigBlk|SigIgn|NoNewPrivs|Seccomp|Cap(Inh|Prm|Eff|Bnd|Amb)|Cpus_allowed_list|Mems_allowed_list):`)

// TestTheRecordedCommandRunsAsAnUntracedLaunchWould records cat printing
// its own conditions and runs the same cat untraced as the bench's
// untraced arm launches it (launch.RunHeld): every condition must be the
// same. A profiler that ran its command on other CPUs, in another
// cgroup, at another priority, with other signals blocked or another
// environment would measure another program's run.
func TestTheRecordedCommandRunsAsAnUntracedLaunchWould(t *testing.T) {
	testenv.RequireBPF(t)
	argv := []string{"cat"}
	for _, f := range conditionFiles {
		// A kernel built without autogroups has no such file.
		if _, err := os.Stat(f); err == nil {
			argv = append(argv, f)
		}
	}
	out := rectest.Record(t, filepath.Join(t.TempDir(), "run"), rectest.Options{}, argv...)
	var plain bytes.Buffer
	ex, err := launch.RunHeld(t.Context(), argv, nil, &plain, io.Discard, nil)
	if err != nil || ex.Code != 0 {
		t.Fatalf("the untraced cat: %v (exit %d)", err, ex.Code)
	}
	traced, untraced := conditions(t, out.Stdout), conditions(t, plain.String())
	t.Logf("%d conditions compared", len(untraced))
	for _, k := range slices.Sorted(maps.Keys(untraced)) {
		if traced[k] != untraced[k] {
			t.Errorf("%s: recorded %q, untraced %q", k, traced[k], untraced[k])
		}
	}
	for k, v := range traced {
		if _, ok := untraced[k]; !ok {
			t.Errorf("%s: recorded %q, untraced not at all", k, v)
		}
	}
}

// conditions parses conditionFiles as cat printed them into one map, by
// what each file's lines look like; it fails the test when one of them
// is missing.
func conditions(t *testing.T, printed string) map[string]string {
	t.Helper()
	c := map[string]string{}
	var environ string
	lines := strings.Split(printed, "\n")
	cgroup := regexp.MustCompile(`^[0-9]+:[^:]*:/`)
	stat := regexp.MustCompile(`^[0-9]+ \(cat\) (.*)$`)
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case statusConditions.MatchString(l):
			k, v, _ := strings.Cut(l, ":")
			c["status "+k] = strings.TrimSpace(v)
		case strings.HasPrefix(l, "Max "):
			name, limits, _ := strings.Cut(l, "  ")
			c["limit "+name] = strings.Join(strings.Fields(limits), " ")
		case cgroup.MatchString(l):
			id, rest, _ := strings.Cut(l, ":")
			ctrl, path, _ := strings.Cut(rest, ":")
			c["cgroup "+id+":"+ctrl] = path
		case stat.MatchString(l):
			// After the comm: state is field 3 of proc(5); pgrp 5,
			// session 6, tty_nr 7, nice 19, rt_priority 40, policy 41.
			f := strings.Fields(stat.FindStringSubmatch(l)[1])
			for _, fld := range []struct {
				name string
				n    int
			}{{"pgrp", 5}, {"session", 6}, {"tty_nr", 7}, {"nice", 19}, {"rt_priority", 40}, {"policy", 41}} {
				if fld.n-3 < len(f) {
					c["stat "+fld.name] = f[fld.n-3]
				}
			}
			// autogroup follows stat: one line, or none when the session
			// is in the default autogroup (autogroups disabled when it
			// began, or a kernel without them); then timerslack_ns, then
			// the environment, up to the end.
			rest := lines[i+1:]
			c["autogroup"] = "(the default autogroup: the file is empty)"
			if len(rest) > 0 && strings.HasPrefix(rest[0], "/autogroup-") {
				c["autogroup"], rest = rest[0], rest[1:]
			}
			if len(rest) > 0 {
				c["timerslack_ns"] = rest[0]
				environ = strings.Join(rest[1:], "\n")
			}
			i = len(lines)
		}
	}
	for _, kv := range strings.Split(environ, "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			c["env "+k] = v
		}
	}
	for _, want := range []string{"status SigBlk", "status Cpus_allowed_list", "limit Max open files", "stat nice", "stat policy", "autogroup", "timerslack_ns", "env PATH"} {
		if _, ok := c[want]; !ok {
			t.Fatalf("no %s in what cat printed of itself: %.400q", want, printed)
		}
	}
	if len(c) < 30 {
		t.Fatalf("only %d conditions in what cat printed of itself: %.400q", len(c), printed)
	}
	return c
}
