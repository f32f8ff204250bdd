package main

import (
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/testkit/runtest"
)

func TestReportOfTwoRunsBadUsageIsOneLineError(t *testing.T) {
	a := runtest.TinyRun(t)
	out := filepath.Join(t.TempDir(), "r.html")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"one argument", []string{a}, "one run (-i DIR) or two side by side (A B)"},
		{"three arguments", []string{a, a, a}, "one run (-i DIR) or two side by side (A B)"},
		{"-i and two runs", []string{"-i", a, a, a}, "one run (-i DIR) or two side by side (A B)"},
		{"B is no run", []string{a, t.TempDir()}, "is not a run directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"report", "-o", out}, tc.args...)...)
			requireOneLineError(t, err, "report", tc.want)
		})
	}
}
