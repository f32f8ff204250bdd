package output

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/sweep"
)

// A sweep's summary has sweep.json's columns in every format; a figure NA
// is null, its one reason beside the rows, and only a figure whose runs
// give different reasons has a reason column.
func TestASweepSummaryHasOneSchemaInEveryFormatAndNoReasonsInItsRows(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	const noDecode = "no decode token was recorded"
	rows := []sweep.Row{
		{Budget: "2MiB", MemLimit: 2 << 20, Status: "killed", ExitCode: 137, RunDir: "2MiB",
			NA: map[string]string{"tokens_per_s": noDecode, "untraced_tokens_per_s": noDecode, "reported_tokens_per_s": noDecode,
				"bytes_read_per_token": noDecode, "major_faults_per_token": noDecode, "stall_share": noDecode, "expert_hit_rate": "the model has no experts"}},
		{Budget: "128MiB", MemLimit: 128 << 20, Status: "ok", RunDir: "128MiB", Decode: 3, DecodeNS: 9e8, ReadBytes: 3 << 20, Major: 44, StallNS: 1e9,
			TokensPerS: f(3), UntracedTokensPerS: f(2.5), ReportedTokensPerS: f(3.25), BytesPerToken: f(1 << 20), MajorPerToken: f(14), StallShare: f(1),
			NA: map[string]string{"expert_hit_rate": "iocorr stats has no real-run row in its cache_sim table"}},
	}
	var csvOut, jsonOut bytes.Buffer
	na, err := SweepExport(&csvOut, CSV, rows)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := SweepExport(&jsonOut, JSONL, rows); err != nil {
		t.Fatal(err)
	}
	header := strings.Split(strings.SplitN(csvOut.String(), "\r\n", 2)[0], ",")
	var first map[string]any
	dec := json.NewDecoder(strings.NewReader(jsonOut.String()))
	if err := dec.Decode(&first); err != nil {
		t.Fatal(err)
	}
	var jsonCols []string
	for c := range first {
		jsonCols = append(jsonCols, c)
	}
	if slices.Sort(jsonCols); !slices.Equal(jsonCols, slices.Sorted(slices.Values(header))) {
		t.Errorf("CSV columns %v, JSON %v", header, jsonCols)
	}
	for _, want := range []string{"decode_wall_ns", "tokens_per_s", "expert_hit_rate", "expert_hit_rate_na_reason"} {
		if !slices.Contains(header, want) {
			t.Errorf("header %v has no %s", header, want)
		}
	}
	if slices.Contains(header, "na") || slices.Contains(header, "tokens_per_s_na_reason") {
		t.Errorf("header %v carries reasons that are one per column", header)
	}
	if first["tokens_per_s"] != nil || first["expert_hit_rate_na_reason"] != "the model has no experts" {
		t.Errorf("failed run's row %v", first)
	}
	if na.Some["tokens_per_s"] != noDecode || !slices.Equal(na.PerRow, []string{"expert_hit_rate"}) {
		t.Errorf("NA %+v: want tokens_per_s's one reason and expert_hit_rate's per row", na)
	}
	if !strings.Contains(csvOut.String(), "\r\n\"128MiB\",134217728,\"ok\",0,\"128MiB\",3,900000000,3145728,44,1000000000,3.0,2.5,3.25,1.048576e+06,14.0,1.0,,\"iocorr stats") {
		t.Errorf("CSV:\n%s", csvOut.String())
	}
}
