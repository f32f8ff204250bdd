//go:build linux

package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/stats"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
)

// recordForced records args with `iocorr record` with the features
// switched off and checks that the run says which path it took. It
// records the pagecache tier, which asks for every kernel capability.
// (The forced-fallback matrix itself is recorder's
// capability_matrix_test.go.)
func recordForced(t *testing.T, without, capName string, args ...string) string {
	t.Helper()
	t.Setenv(bpf.WithoutEnv, without)
	dir := filepath.Join(t.TempDir(), "run")
	_, errOut, err := runCmd(t, append([]string{"record", "-o", dir, "--probe", "pagecache"}, args...)...)
	if err != nil {
		t.Fatalf("record without %q: %v\n%s", without, err, errOut)
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range m.Capabilities {
		if c.Name == capName && c.Primary {
			t.Fatalf("without %s, %s still took its primary path %q", without, capName, c.Path)
		}
	}
	if without != "" && !strings.Contains(errOut, "kernel") {
		t.Errorf("the summary says nothing of the fallbacks taken:\n%s", errOut)
	}
	return dir
}

// A capability the kernel gives no path (switched off here as a kernel
// without the feature would lack it) leaves its counters NA with the
// capability's reason in query, the exports and stats, never the zeros
// the store holds for them; the counters of the capabilities it had stay
// measured.
func TestACapabilityWithNoPathIsNAWithItsReasonInEveryOutput(t *testing.T) {
	requireBPF(t)
	toucher := llmtest.BuildToucher(t)
	model, f := rectest.PageableMoE(t)
	tn := f.Tensor("blk.0.attn_q.weight")
	page := (tn.FileOffset+4095)/4096 + 1
	faults := []string{"faults", "major_faults", "minor_faults", "unaccounted_faults", "fault_stall_ns"}
	for _, tc := range []struct {
		without, cap string
		na           []string
		measured     string // a counter the run still has
	}{
		{"block_rq_issue", bpf.CapBlock, []string{"bytes_read", "block_requests"}, "major_faults"},
		{"syscalls/sys_enter_read", bpf.CapReads, []string{"bytes_requested"}, "major_faults"},
		{"page_fault_user,page-faults", bpf.CapFaults, faults, "bytes_read"},
	} {
		t.Run("without "+tc.without, func(t *testing.T) {
			dir := recordForced(t, tc.without, tc.cap, "--cold", "--model", model, "--", toucher, "-file", model, "-pages", itoa(page))
			meta, err := rundir.ReadMeta(dir)
			if err != nil {
				t.Fatal(err)
			}
			why := "this run's kernel gave the " + tc.cap + " capability no path"
			if got := meta.CapabilityNA(tc.cap); !strings.Contains(got, why) {
				t.Fatalf("meta.json: %s NA %q, want %q", tc.cap, got, why)
			}
			for _, args := range [][]string{
				{"query", "-i", dir, "--by", "tensor"},
				{"export", "-i", dir, "faults-per-token-tensor"},
			} {
				checkUnmeasured(t, args, tc.na, tc.measured, why)
			}
			// Sorting by an unmeasured counter would order zeros.
			if _, _, err := runCmd(t, "query", "-i", dir, "--sort", tc.na[0]); err == nil || !strings.Contains(err.Error(), why) {
				t.Errorf("query --sort %s: %v, want it refused: %s", tc.na[0], err, why)
			}
			checkStatsNA(t, dir, tc.na, why)
		})
	}
}

// checkStatsNA checks that every stats figure computed from one of the NA
// counters is NA with why, in stats' JSON and in a stats export, and that
// every figure stats.CounterFigures names is a column of stats (a renamed column
// would otherwise keep its zeros).
func checkStatsNA(t *testing.T, dir string, na []string, why string) {
	t.Helper()
	tables := statsTables(t, dir)
	checked := 0
	for _, f := range stats.CounterFigures {
		rows, ok := tables[f.Table]
		if !ok {
			t.Errorf("stats has no table %s (stats.CounterFigures names it)", f.Table)
			continue
		}
		hit := slices.ContainsFunc(f.Counters, func(c string) bool { return slices.Contains(na, c) })
		for _, row := range rows {
			if f.Row != "" && row["policy"] != f.Row {
				continue
			}
			for col, v := range row {
				if strings.HasSuffix(col, "_na_reason") || !f.Matches(col) {
					continue
				}
				reason, _ := row[col+"_na_reason"].(string)
				switch {
				case hit && (v != nil || !strings.Contains(reason, why)):
					t.Errorf("stats %s.%s = %v (reason %q), want NA: %s", f.Table, col, v, reason, why)
				case !hit && strings.Contains(reason, why):
					t.Errorf("stats %s.%s NA with %q, but it does not come from %v", f.Table, col, reason, na)
				}
				checked++
			}
		}
	}
	if checked == 0 {
		t.Errorf("no stats figure checked")
	}
	// A figure NA for one reason is null, the reason said once on stderr
	// (and in the sidecar); one NA in every row is left out unless
	// --all-columns keeps it.
	csvOut, errOut, err := runCmd(t, "export", "-i", dir, "stats", "--table", "amplification", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(csvOut+errOut, why) {
		t.Errorf("the stats export does not say why:\n%s\n%s", csvOut, errOut)
	}
	if _, errOut, err = runCmd(t, "export", "-i", dir, "stats", "--table", "amplification", "--format", "csv", "--all-columns"); err != nil || !strings.Contains(errOut, why) {
		t.Errorf("the stats export with --all-columns does not say why (%v):\n%s", err, errOut)
	}
}
