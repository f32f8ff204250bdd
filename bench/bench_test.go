package bench

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

func TestSummarizeGivesMedianMinAndMax(t *testing.T) {
	for _, tc := range []struct {
		xs            []float64
		med, min, max float64
	}{
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 3, 1, 5},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	} {
		med, lo, hi := summarize(tc.xs)
		if med != tc.med || lo != tc.min || hi != tc.max {
			t.Errorf("summarize(%v) = %v, %v, %v; want %v, %v, %v", tc.xs, med, lo, hi, tc.med, tc.min, tc.max)
		}
	}
}

func TestAFigureWithoutSamplesIsNAWithItsReason(t *testing.T) {
	var r Report
	r.Add("s", "measured", "ratio", []float64{0.9, 1.1, 1}, "")
	r.Add("s", "unmeasured", "ratio", nil, "the run read 0 MiB")
	r.Add("s", "silent", "ratio", nil, "")
	if f := r.Figures[0]; f.NA != "" || f.N != 3 || f.Median != 1 || f.Min != 0.9 || f.Max != 1.1 {
		t.Errorf("measured figure %+v", f)
	}
	if f := r.Figures[1]; f.NA != "the run read 0 MiB" || f.N != 0 {
		t.Errorf("unmeasured figure %+v", f)
	}
	if f := r.Figures[2]; f.NA == "" {
		t.Errorf("a figure without samples or reason is not NA: %+v", f)
	}
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 || !strings.Contains(lines[2], "NA: the run read 0 MiB") {
		t.Errorf("table:\n%s", b.String())
	}
}

func TestTokensPerSecondReadsLlamaBenchJSON(t *testing.T) {
	v, err := tokensPerSecond([]byte(`[{"n_gen": 16, "avg_ts": 12.5, "stddev_ts": 0}]`))
	if err != nil || v != 12.5 {
		t.Errorf("got %v, %v; want 12.5", v, err)
	}
	for _, bad := range []string{``, `[]`, `[{"avg_ts": 0}]`, `[{"avg_ts": 1}, {"avg_ts": 2}]`, `garbage`} {
		if _, err := tokensPerSecond([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestEachArmReadsItsOwnCommandsTokensPerSecond(t *testing.T) {
	for _, tc := range []struct {
		name string
		arm  Arm
		out  string
		want float64 // 0: an error
	}{
		{"llama-bench", Arm{}, `[{"n_gen": 16, "avg_ts": 12.5}]`, 12.5},
		{"the driver, after its progress", Arm{Driver: true}, "loading\n{\"generated\": 128, \"tokens_per_s\": 98.5}\n", 98.5},
		{"the driver, no speed", Arm{Driver: true}, `{"generated": 0, "tokens_per_s": 0}`, 0},
		{"the driver, no report", Arm{Driver: true}, `Error: model not found`, 0},
		{"llama-bench's report read as the driver's", Arm{Driver: true}, `[{"avg_ts": 12.5}]`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.arm.tokensPerSecond([]byte(tc.out))
			if got != tc.want || (err == nil) != (tc.want > 0) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	cfg := Config{LlamaBench: "/b/llama-bench", Tokens: 16, RAMTokens: 128, Threads: 2}
	driver, cold := Arm{Driver: true}, Arm{Cold: true}
	if got := strings.Join(driver.argv(cfg, "m.gguf"), " "); !strings.HasPrefix(got, "node ") ||
		!strings.Contains(got, "generate.mjs --model m.gguf --tokens 128 --threads 2 --json") {
		t.Errorf("the driver arm runs %q", got)
	}
	if got := cold.argv(cfg, "m.gguf"); got[0] != cfg.LlamaBench || !slices.Contains(got, "16") {
		t.Errorf("a cold llama-bench arm runs %q", got)
	}
}

func TestMetricCollectsOneSamplePerBenchmarkLine(t *testing.T) {
	out := []byte(`goos: linux
BenchmarkIngest-2         	       1	9000000000 ns/op	   1111111 events/s
BenchmarkIngestOther-2    	       1	9000000000 ns/op	   5 events/s
BenchmarkQueryTensor-2    	       1	  12000000 ns/op	        12.00 ms/query
BenchmarkIngest-2         	       1	9000000000 ns/op	   1222222 events/s
PASS
`)
	if got := metric(out, "BenchmarkIngest", "events/s"); !slices.Equal(got, []float64{1111111, 1222222}) {
		t.Errorf("events/s %v", got)
	}
	if got := metric(out, "BenchmarkQueryTensor", "ms/query"); !slices.Equal(got, []float64{12}) {
		t.Errorf("ms/query %v", got)
	}
}

func TestFloorScriptCountsOnTheProbesTheRunAttached(t *testing.T) {
	dir := t.TempDir()
	m := &rundir.Meta{Probes: []rundir.Probe{
		{Kind: "tp_btf", Target: "page_fault_user"},
		{Kind: "tracepoint", Target: "filemap/mm_filemap_fault"},
		{Kind: "tracepoint", Target: "readahead/page_cache_sync_ra", Error: "not attached"},
		{Kind: "perf_event", Target: "page-faults-major"},
		{Kind: "uprobe", Target: "/lib/libllama.so", Symbol: "llama_decode"},
		{Kind: "uretprobe", Target: "/lib/libllama.so", Symbol: "llama_decode"},
		{Kind: "uprobe", Target: "/lib/libggml-cpu.so", Symbol: "ggml_compute_forward_get_rows", Error: "no such symbol"},
		{Kind: "capability", Target: "page_cache", Error: "NA: not in this tier"},
	}}
	if err := rundir.WriteMeta(dir, m); err != nil {
		t.Fatal(err)
	}
	got, err := floorScript(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := `software:major-faults:1 { @n["p0"] = count(); }` + "\n" +
		`tracepoint:*:page_fault_user { @n["p1"] = count(); }` + "\n" +
		`tracepoint:filemap:mm_filemap_fault { @n["p2"] = count(); }` + "\n" +
		`uprobe:"/lib/libllama.so":llama_decode { @n["p3"] = count(); }` + "\n" +
		`uretprobe:"/lib/libllama.so":llama_decode { @n["p4"] = count(); }` + "\n" +
		"END { clear(@n); }\n"
	if got != want {
		t.Errorf("script\n%s\nwant\n%s", got, want)
	}
	for _, p := range []rundir.Probe{
		{Kind: "perf_event", Target: "cpu-cycles"},
		{Kind: "uprobe_multi", Target: "/lib/libggml-cpu.so", Symbol: "ggml_compute_forward_* (80 functions)"},
	} {
		m.Probes = []rundir.Probe{p}
		if err := rundir.WriteMeta(dir, m); err != nil {
			t.Fatal(err)
		}
		if _, err := floorScript(dir); err == nil {
			t.Errorf("a %s probe without a bpftrace floor gave no error", p.Kind)
		}
	}
	if _, err := floorScript(filepath.Join(dir, "none")); err == nil {
		t.Error("no run directory gave no error")
	}
}

func TestGoalJudgesTheNamedStatisticAndLeavesNAUnjudged(t *testing.T) {
	var r Report
	r.Add("s", "speed", "ratio", []float64{0.97, 0.99, 1.2}, "")
	r.goal(">=", 0.98, "median")
	r.Add("s", "lost", "count", []float64{0, 0, 3}, "")
	r.goal("<=", 0, "max")
	r.Add("s", "cpu", "ratio", []float64{1.04}, "")
	r.goal("<=", 1.05, "median")
	r.NA("s", "spool", "MiB/GiB", "in RAM")
	r.goal("<=", 1.9, "median")
	r.Add("s", "sweep", "ratio", []float64{0.96, 1.03, 1.05}, "")
	r.goalWithin(0.97, 1.04, "median")
	r.Add("s", "sweep", "ratio", []float64{0.96, 1.05, 1.05}, "")
	r.goalWithin(0.97, 1.04, "median")
	for i, want := range []string{"median >= 0.980: met", "max <= 0.000: MISSED", "median <= 1.050: met", "median <= 1.900",
		"median within 0.970–1.040: met", "median within 0.970–1.040: MISSED"} {
		if got := r.Figures[i].Target.String(); got != want {
			t.Errorf("%s: target %q, want %q", r.Figures[i].Name, got, want)
		}
	}
	if r.Figures[3].Target.Met != nil {
		t.Error("an NA figure was judged")
	}
}

func TestAnArmRunsWhenNamedByItsLetterOrWholeNameOrWhenNoneAreNamed(t *testing.T) {
	for _, tc := range []struct {
		arms []string
		name string
		want bool
	}{
		{nil, "c memlimit cold default", true},
		{[]string{"c"}, "c memlimit cold default", true},
		{[]string{"c memlimit cold default"}, "c memlimit cold default", true},
		{[]string{"a", "e"}, "c memlimit cold default", false},
		{[]string{"memlimit"}, "c memlimit cold default", false},
	} {
		if got := (Config{Arms: tc.arms}).runsArm(tc.name); got != tc.want {
			t.Errorf("arms %q: runsArm(%q) = %v, want %v", tc.arms, tc.name, got, tc.want)
		}
	}
}

// A run whose llama.cpp lost its eval-time line measured nothing: it runs
// again, at most lostLogTries times in all; any other failure is final.
func TestARunThatLostItsReportRunsAgainAndNothingElseDoes(t *testing.T) {
	lost := errors.New("plain run: " + sweep.NoReport([]byte("llama\nbd cn")))
	other := errors.New("exit status 1")
	for _, tc := range []struct {
		name    string
		results []error
		runs    int
		ok      bool
	}{
		{"reported at once", []error{nil}, 1, true},
		{"lost once, then reported", []error{lost, nil}, 2, true},
		{"lost every time", []error{lost, lost, lost, nil}, lostLogTries, false},
		{"failed otherwise", []error{other, nil}, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			runs := 0
			got, err := again(Config{Log: io.Discard}, func() (int, error) {
				runs++
				return runs, tc.results[runs-1]
			})
			if runs != tc.runs || (err == nil) != tc.ok || (tc.ok && got != runs) {
				t.Errorf("%d runs, result %d, error %v: want %d runs, ok %v", runs, got, err, tc.runs, tc.ok)
			}
		})
	}
}
