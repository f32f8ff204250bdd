package sweep

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
)

func TestRunStatusSaysHowTheRunEnded(t *testing.T) {
	tests := []struct {
		name string
		meta rundir.Meta
		want string
	}{
		{"clean exit", rundir.Meta{Finished: true, Complete: true}, StatusOK},
		{"non-zero exit", rundir.Meta{Finished: true, Complete: true, Child: rundir.Child{ExitCode: 3}}, "exit status 3"},
		{"OOM-killed, cgroup v2", rundir.Meta{Finished: true, Child: rundir.Child{Signal: "SIGKILL"},
			Controls: rundir.Controls{CgroupCounters: map[string]uint64{"memory.events.oom_kill": 1}}}, "killed by SIGKILL (OOM: 1 OOM kills in its memory cgroup)"},
		{"OOM-killed, cgroup v1", rundir.Meta{Finished: true, Child: rundir.Child{Signal: "SIGKILL"},
			Controls: rundir.Controls{CgroupCounters: map[string]uint64{"memory.failcnt": 7}}}, "killed by SIGKILL (OOM: its memory cgroup hit the limit 7 times)"},
		{"killed otherwise", rundir.Meta{Finished: true, Child: rundir.Child{Signal: "SIGTERM"}}, "killed by SIGTERM"},
		{"events lost", rundir.Meta{Finished: true, Warnings: []string{"12 events lost"}}, "incomplete run: 12 events lost (see meta.json warnings)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := runStatus(&tc.meta); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestRunRefusesBudgetsThatCannotNameADirectory(t *testing.T) {
	for _, b := range [][]Budget{nil, {{"", 1 << 20}}, {{"a/b", 1 << 20}}, {{"..", 1 << 20}}, {{"64MiB", 64 << 20}, {"64MiB", 64 << 20}}} {
		_, err := Run(t.Context(), Options{Dir: t.TempDir(), Budgets: b})
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("budgets %v: %v, want a one-line error", b, err)
		}
	}
}

func TestSummaryRoundTrips(t *testing.T) {
	dir := t.TempDir()
	v := 1.5
	in := Summary{Command: []string{"x", "y"}, Cold: true, Rows: []Row{{Budget: "8MiB", MemLimit: 8 << 20, Status: "exit status 1",
		NA: map[string]string{"tokens_per_s": "the run failed"}}, {Budget: "1GiB", MemLimit: 1 << 30, Status: StatusOK, TokensPerS: &v}}}
	if err := WriteSummary(dir, &in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadSummary(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Rows) != 2 || *out.Rows[1].TokensPerS != 1.5 || out.Rows[0].TokensPerS != nil || out.Rows[0].NA["tokens_per_s"] != "the run failed" {
		t.Errorf("read back %+v", out)
	}
	if _, err := ReadSummary(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no sweep directory") {
		t.Errorf("a directory without sweep.json: %v", err)
	}
}
