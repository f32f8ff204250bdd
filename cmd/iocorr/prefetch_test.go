//go:build linux

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

func TestPrefetchRejectsBadUsage(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"prefetch"}, "no command given"},
		{[]string{"prefetch", "--window", "lots", "--", "true"}, `"lots" is not a size`},
		{[]string{"prefetch", "--window", "0", "--", "true"}, `"0" is not a size`},
		{[]string{"prefetch", "--mem-limit", "lots", "--", "true"}, "--mem-limit"},
		{[]string{"prefetch", "--pin", "plan.json", "--", "true"}, "--pin needs --mem-limit"},
		{[]string{"prefetch", "--", "no-such-command-iocorr"}, "not found"},
		{[]string{"record", "--prefetch-window", "8MiB", "--", "true"}, "--prefetch-window, --prefetch-layers and --prefetch-release need --prefetch"},
		{[]string{"record", "--prefetch-layers", "--", "true"}, "--prefetch-window, --prefetch-layers and --prefetch-release need --prefetch"},
		{[]string{"record", "--prefetch", "--prefetch-window", "-1", "--", "true"}, `"-1" is not a size`},
		{[]string{"record", "--prefetch", "-p", "1"}, "--prefetch needs a launched command"},
	}
	for _, tc := range tests {
		_, _, err := runCmd(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// `iocorr prefetch` of llama.cpp on the test MoE, cold under the tests'
// limit: the command's output is its own, the report's lines are on
// stderr, and --report holds the same report, which asked for pages.
func TestPrefetchRunsTheCommandAndReports(t *testing.T) {
	requireBPF(t)
	llmtest.Require(t)
	report := filepath.Join(t.TempDir(), "prefetch.json")
	argv := llmtest.CompletionArgs(llmtest.CLI(t, llmtest.Shared, "llama-completion"), llmtest.Model(t, llmtest.MoE), 4)
	_, errOut, err := runCmd(t, append([]string{"prefetch", "--cold", "--mem-limit", llmtest.MemLimit, "--report", report, "--"}, argv...)...)
	if err != nil {
		t.Fatalf("prefetch: %v\n%s", err, errOut)
	}
	for _, want := range []string{"prefetch: ", "arrived before use", "own CPU"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr has no %q:\n%s", want, errOut)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var rep rundir.Prefetched
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Picks == 0 || rep.AskedBytes == 0 || rep.Window == 0 || rep.OutcomeNA != "" {
		t.Errorf("report %+v", rep)
	}
}
