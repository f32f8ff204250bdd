package sweeprun

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

func TestRunStatusSaysHowTheRunEnded(t *testing.T) {
	tests := []struct {
		name string
		meta rundir.Meta
		want string
	}{
		{"clean exit", rundir.Meta{Finished: true, Complete: true}, sweep.StatusOK},
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
		_, err := Run(t.Context(), Sweep{Dir: t.TempDir(), Budgets: b})
		if err == nil || strings.Contains(err.Error(), "\n") {
			t.Errorf("budgets %v: %v, want a one-line error", b, err)
		}
	}
}
