package sweep

import (
	"strings"
	"testing"
)

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

// Summarize leaves NA nil when it computed every figure; the speeds the
// sweep adds after it must still be able to say why they are missing
// (a nil map here made iocorr sweep panic on a command that printed no
// speed line).
func TestARowWithEveryFigureComputedTakesALaterNA(t *testing.T) {
	for _, r := range []Row{{}, {NA: map[string]string{"stall_share": "x"}}} {
		r.SetNA("reported_tokens_per_s", NoReportedTokensPerS)
		if r.NA["reported_tokens_per_s"] != NoReportedTokensPerS {
			t.Errorf("SetNA on %v: %v", r, r.NA)
		}
	}
}
