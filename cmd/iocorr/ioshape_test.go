package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// shapeFloat is a figure of a JSON row, ok false where it is null.
func shapeFloat(t *testing.T, row map[string]any, col string) (float64, bool) {
	t.Helper()
	switch v := row[col].(type) {
	case nil:
		if row[col+"_na_reason"] == nil && row["na_reason"] == nil {
			t.Errorf("%s is null with no reason in %v", col, row)
		}
		return 0, false
	case float64:
		return v, true
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			t.Fatal(err)
		}
		return f, true
	}
	t.Fatalf("%s is %T", col, row[col])
	return 0, false
}

// The I/O shape reaches every output of the recorded MoE run: stats'
// io_shape rows by phase, each with a busy_share and a verdict (or why
// not), agreeing with its per-token rows summed over the tokens' wall
// time; query --by token and export faults-per-token carry the same
// figures per token, and the export's sidecar says why one is NA.
func TestTheIOShapeReachesStatsQueryAndExport(t *testing.T) {
	dir := llmtest.RecordedMoE(t).Dir
	s := runStats(t, dir)
	phases := s.Tables["io_shape"]
	var names []string
	for _, r := range phases {
		names = append(names, r["phase"].(string))
	}
	if !slices.Equal(names, []string{"prefill", "decode", "all"}) {
		t.Fatalf("io_shape rows %v, want prefill, decode, all", names)
	}
	perToken := s.Tables["io_shape_tokens"]
	for _, r := range phases {
		busy, ok := shapeFloat(t, r, "busy_share")
		if ok && (busy < 0 || busy > 1) {
			t.Errorf("%s: busy share %v", r["phase"], busy)
		}
		if v, _ := r["verdict"].(string); !slices.Contains([]string{"compute", "latency", "bandwidth"}, v) && r["verdict_na_reason"] == nil {
			t.Errorf("%s: verdict %v with no reason", r["phase"], r["verdict"])
		}
		if !ok {
			continue
		}
		// The phase's busy time is its tokens' summed, where each token's
		// is known: a phase may take a token whose own share is NA (more
		// than 1% of its requests without completion) within its 1%.
		var busyNS, wall float64
		partial := false
		for _, tr := range perToken {
			if tr["phase"] != r["phase"] && r["phase"] != "all" {
				continue
			}
			b, okB := shapeFloat(t, tr, "busy_share")
			w, okW := shapeFloat(t, tr, "wall_ns")
			if okB && okW {
				busyNS += b * w
				wall += w
			} else if okW {
				partial = true
			}
		}
		if partial {
			t.Logf("%s: a token's busy share is NA: the phase's %v is not its known tokens' %v", r["phase"], busy, busyNS/wall)
		} else if math.Abs(busyNS/wall-busy) > 1e-9 {
			t.Errorf("%s: busy share %v, its tokens' %v", r["phase"], busy, busyNS/wall)
		}
	}
	byToken := map[float64]map[string]any{}
	for _, tr := range perToken {
		byToken[tr["token"].(float64)] = tr
	}
	rows, notes := jsonOut(t, "query", "-i", dir, "--by", "token")
	if len(rows) != len(perToken) {
		t.Fatalf("query --by token: %d rows, stats %d tokens", len(rows), len(perToken))
	}
	for _, r := range rows {
		tok, _ := r["token"].(json.Number).Float64()
		want := byToken[tok]
		for _, col := range []string{"busy_share", "requests_in_flight_mean", "stall_share", "verdict"} {
			got, _ := json.Marshal(r[col])
			w, _ := json.Marshal(want[col])
			if string(got) != string(w) {
				t.Errorf("token %v: query %s %s, stats %s", tok, col, got, w)
			}
		}
	}
	// The run's disk was never measured: its rows say so, or the notes.
	for _, r := range rows {
		why, _ := r["device_bandwidth_mb_per_s_na_reason"].(string)
		if r["device_bandwidth_mb_per_s"] == nil && why == "" && !strings.Contains(notes, "device_bandwidth_mb_per_s: ") {
			t.Errorf("token %v: the device's bandwidth is NA without a reason:\n%s", r["token"], notes)
		}
	}
	// A filtered query's rows are some tensors' only: no token figures.
	some := jsonRows(t, "query", "-i", dir, "--by", "token", "--layer", "0")
	if _, ok := some[0]["busy_share"]; ok {
		t.Error("a query of one layer carries the whole token's I/O shape")
	}
	out := filepath.Join(t.TempDir(), "tokens.csv")
	if _, errOut, err := runCmd(t, "export", "-i", dir, "faults-per-token", "-o", out); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	header, err := csv.NewReader(bytes.NewReader(b)).Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range []string{"busy_share", "requests_in_flight_mean", "requests_in_flight_peak", "faults_in_flight_mean", "verdict"} {
		if !slices.Contains(header, col) {
			t.Errorf("export faults-per-token has no %s column: %v", col, header)
		}
	}
	side, err := os.ReadFile(output.SidecarPath(out))
	if err != nil {
		t.Fatal(err)
	}
	var sc output.Sidecar
	if err := json.Unmarshal(side, &sc); err != nil {
		t.Fatal(err)
	}
	if rows[0]["device_bandwidth_mb_per_s"] == nil && sc.NA["device_bandwidth_mb_per_s"] == "" && sc.SomeRowsNA["device_bandwidth_mb_per_s"] == "" {
		t.Errorf("the sidecar does not say why device_bandwidth_mb_per_s is NA: %s", side)
	}
}
