package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/internal/llmtest"
	"github.com/iocorr/iocorr/internal/rectest"
)

func TestDiffBadUsageIsOneLineError(t *testing.T) {
	a, b := rectest.TinyRun(t), rectest.TinyRun(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no runs", nil, "want two run directories, A (the baseline) and B, got 0 arguments"},
		{"one run", []string{a}, "got 1 arguments"},
		{"three runs", []string{a, b, a}, "got 3 arguments"},
		{"unknown group", []string{"--by", "colour", a, b}, `cannot compare by "colour"`},
		{"unknown counter", []string{"--counter", "faults,speed", a, b}, `unknown counter "speed"`},
		{"picks outside --by expert", []string{"--counter", "selected", a, b}, "only compared by expert"},
		{"sort by a counter not compared", []string{"--counter", "faults", "--sort", "bytes_read", a, b}, `cannot sort by "bytes_read"`},
		{"negative top", []string{"--top", "-2", a, b}, "--top must not be negative"},
		{"unknown phase", []string{"--phase", "warmup", a, b}, "unknown phase"},
		{"a tensor neither run has", []string{"--tensor", "blk.7.*", a, b}, `no tensor of either run matches "blk.7.*"`},
		{"bad format", []string{"--format", "xml", a, b}, `unknown format "xml"`},
		{"A is no run", []string{t.TempDir(), b}, "is not a run directory"},
		{"B does not exist", []string{a, "/nonexistent"}, "/nonexistent is not a run directory (no meta.json)"},
		{"B not yet ingested", []string{a, notIngested(t)}, "no store: run `iocorr ingest` first"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, append([]string{"diff"}, tc.args...)...)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "diff: ") || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
				t.Errorf("got %q, want one line starting \"diff: \" containing %q", msg, tc.want)
			}
		})
	}
}

// smallerMoE is the second model of the comparisons: llmtest.MoE cut to
// 6 layers of 4 experts, so that layers 6-7, experts 4-7 and the tensors
// of layers 6-7 are only in the shared run's model.
var smallerMoE = gguf.SynthSpec{Layers: 6, Embd: 512, FF: 1024, Heads: 8, Experts: 4, ExpertsUsed: 2, Type: llmtest.WeightType}

// smallerBudget keeps smallerMoE (85 MiB) reading from the disk while it
// decodes.
const smallerBudget = "64MiB"

var secondRun struct {
	once sync.Once
	dir  string
	err  error
}

// recordedPair returns two real runs of different models: A, the shared
// run (llmtest.RecordedMoE: the Node driver on llmtest.MoE under 112 MiB),
// and B, llama-completion of the shared build generating 8 tokens on
// smallerMoE under smallerBudget, recorded once per test binary; and
// both models' files.
func recordedPair(t *testing.T) (a, b, modelA, modelB string) {
	t.Helper()
	requireBPF(t)
	llmtest.Require(t)
	rec := llmtest.RecordedMoE(t)
	modelB = llmtest.Model(t, smallerMoE)
	bin := llmtest.CLI(t, llmtest.Shared, "llama-completion")
	secondRun.once.Do(func() {
		// Named as llmtest names its shared run, so that a later test
		// binary removes it once this process is gone.
		tmp, err := os.MkdirTemp("", fmt.Sprintf("iocorr-recorded-%d-", os.Getpid()))
		if err != nil {
			secondRun.err = err
			return
		}
		dir := filepath.Join(tmp, smallerBudget)
		args := append([]string{"record", "-o", dir, "--cold", "--mem-limit", smallerBudget, "--"}, llmtest.CompletionArgs(bin, modelB, 8)...)
		if _, summary, err := runCmd(t, args...); err != nil {
			secondRun.err = fmt.Errorf("record: %w\n%s", err, summary)
			return
		}
		secondRun.dir = dir
	})
	if secondRun.err != nil {
		t.Fatalf("recording the second run: %v", secondRun.err)
	}
	return rec.Dir, secondRun.dir, rec.Model, modelB
}

// tensorNames are the tensor names of a GGUF file.
func tensorNames(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tn := range f.Tensors {
		names[tn.Name] = true
	}
	return names
}

// TestDiffOfTwoRecordedRunsIsTheDifferenceOfTheirQueries: for every
// grouping, `diff --format json` of two real runs of different models has
// a row per group of either run's query and per counter, whose a and b
// are the two queries' values (0 for a group the run has but charged
// nothing, null for one its model has not: layers 6-7, experts 4-7, the
// tensors of layers 6-7), delta b − a and ratio b / a, or null with a
// reason for a zero baseline.
func TestDiffOfTwoRecordedRunsIsTheDifferenceOfTheirQueries(t *testing.T) {
	a, b, modelA, modelB := recordedPair(t)
	namesA, namesB := tensorNames(t, modelA), tensorNames(t, modelB)
	// onlyA says, independently of iocorr, whether a group exists only in
	// the model of run A (by the models' shapes).
	onlyA := map[string]func(key string) bool{
		"tensor": func(k string) bool { return namesA[k] && !namesB[k] },
		"layer": func(k string) bool {
			l, err := strconv.Atoi(k)
			return err == nil && l >= smallerMoE.Layers
		},
		"expert": func(k string) bool {
			e, err := strconv.Atoi(k)
			return err == nil && e >= smallerMoE.Experts
		},
	}
	for _, by := range index.GroupBys {
		t.Run("by "+by, func(t *testing.T) {
			query := func(dir string) map[string]map[string]any {
				m := map[string]map[string]any{}
				for _, r := range jsonRows(t, "query", "-i", dir, "--by", by) {
					m[fmt.Sprint(r[by])] = r
				}
				return m
			}
			qa, qb := query(a), query(b)
			counters := diff.Counters(by)
			rows := jsonRows(t, "diff", "--by", by, a, b)
			seen := map[string]int{}
			var inA, inB int
			for _, r := range rows {
				key, counter, in := fmt.Sprint(r[by]), r["counter"].(string), r["in"].(string)
				seen[key]++
				if f := onlyA[by]; f != nil && (in == "a") != f(key) {
					t.Errorf("%s %s: in %q, but only in A's model: %v", by, key, in, f(key))
				}
				// What each query says, or 0 for a group a run has and
				// charged nothing, or NA for one it has not.
				expect := func(q map[string]map[string]any, missing bool) (uint64, bool) {
					row, ok := q[key]
					switch {
					case missing:
						if ok {
							t.Errorf("%s %s: in %q, but that run's query has it", by, key, in)
						}
						return 0, false
					case !ok:
						return 0, true
					}
					return jsonUint(t, row[counter])
				}
				wa, okA := expect(qa, in == "b")
				wb, okB := expect(qb, in == "a")
				ga, gotA := jsonUint(t, r["a"])
				gb, gotB := jsonUint(t, r["b"])
				if ga != wa || gotA != okA || gb != wb || gotB != okB {
					t.Errorf("%s %s %s: a %v b %v, the queries say %d (%v) and %d (%v)", by, key, counter, r["a"], r["b"], wa, okA, wb, okB)
					continue
				}
				if okA {
					inA++
				}
				if okB {
					inB++
				}
				reason, _ := r["na_reason"].(string)
				if !okA || !okB {
					if r["delta"] != nil || r["ratio"] != nil || reason == "" {
						t.Errorf("%s %s %s: a value is NA, but delta %v, ratio %v, reason %q", by, key, counter, r["delta"], r["ratio"], reason)
					}
					continue
				}
				if d, err := strconv.ParseInt(string(r["delta"].(json.Number)), 10, 64); err != nil || d != int64(wb)-int64(wa) {
					t.Errorf("%s %s %s: delta %v, want %d", by, key, counter, r["delta"], int64(wb)-int64(wa))
				}
				if wa == 0 {
					if r["ratio"] != nil || !strings.Contains(reason, "no ratio") {
						t.Errorf("%s %s %s: ratio %v over a zero baseline, reason %q", by, key, counter, r["ratio"], reason)
					}
					continue
				}
				ratio, err := r["ratio"].(json.Number).Float64()
				if want := float64(wb) / float64(wa); err != nil || math.Abs(ratio-want) > 1e-12*want {
					t.Errorf("%s %s %s: ratio %v, want %g", by, key, counter, r["ratio"], want)
				}
			}
			for _, q := range []map[string]map[string]any{qa, qb} {
				for key := range q {
					if seen[key] != len(counters) {
						t.Errorf("%s %s: %d rows, want one per counter (%d)", by, key, seen[key], len(counters))
					}
				}
			}
			if len(seen) != len(qa)+len(qb)-common(qa, qb) {
				t.Errorf("%d groups, the queries have %d and %d (%d in both)", len(seen), len(qa), len(qb), common(qa, qb))
			}
			if inA == 0 || inB == 0 {
				t.Errorf("no value measured in A (%d) or B (%d)", inA, inB)
			}
			t.Logf("by %s: %d groups (A %d, B %d), %d rows", by, len(seen), len(qa), len(qb), len(rows))
		})
	}
}

func common(x, y map[string]map[string]any) int {
	n := 0
	for k := range x {
		if _, ok := y[k]; ok {
			n++
		}
	}
	return n
}

// TestDiffOfRunsOfDifferentModelsSaysWhichTensorsOnlyOneHas: the tensors
// of the shared run's model that smallerMoE has not (layers 6 and 7) are
// named, with their count, after the table and on stderr beside JSON, and
// every row of theirs has b NA.
func TestDiffOfRunsOfDifferentModelsSaysWhichTensorsOnlyOneHas(t *testing.T) {
	a, b, modelA, modelB := recordedPair(t)
	namesA, namesB := tensorNames(t, modelA), tensorNames(t, modelB)
	var only []string
	for n := range namesA {
		if !namesB[n] {
			only = append(only, n)
		}
	}
	if len(only) == 0 {
		t.Fatal("the models have the same tensors")
	}
	for n := range namesB {
		if !namesA[n] {
			t.Fatalf("%s is only in B's model", n)
		}
	}
	line := fmt.Sprintf("only in run A: %d tensors: ", len(only))
	out, _, err := runCmd(t, "diff", a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, line) || !strings.Contains(out, "blk.6.") || strings.Contains(out, "only in run B") {
		t.Errorf("the table does not say %q:\n%s", line, out)
	}
	if !strings.Contains(out, "NA: run B: the tensor is not in run B's model") {
		t.Errorf("the table does not give the NA's reason:\n%s", out)
	}
	_, errOut, err := runCmd(t, "diff", "--format", "csv", a, b)
	if err != nil || !strings.Contains(errOut, "iocorr: note: "+line) {
		t.Errorf("stderr beside CSV %q (%v), want a note %q", errOut, err, line)
	}
	nonly := map[string]bool{}
	for _, r := range jsonRows(t, "diff", "--tensor", "blk.*", a, b) {
		name := r["tensor"].(string)
		if !slices.Contains(only, name) {
			continue
		}
		nonly[name] = true
		if r["in"] != "a" || r["b"] != nil || r["na_reason"] != "run B: the tensor is not in run B's model" {
			t.Errorf("%s %s: in %v, b %v, reason %v", name, r["counter"], r["in"], r["b"], r["na_reason"])
		}
	}
	if len(nonly) == 0 {
		t.Error("no row of a tensor only A has: layers 6-7 read nothing?")
	}
	t.Logf("%d tensors only in A, %d of them with rows", len(only), len(nonly))
}

// TestDiffOfAnUnfinishedRunSaysWhichRunInEveryOutput: B's recorder did
// not finish; stderr names run B and its directory, CSV starts with a
// comment and every JSON row carries it, prefixed "run B: ".
func TestDiffOfAnUnfinishedRunSaysWhichRunInEveryOutput(t *testing.T) {
	a, b := rectest.TinyRun(t), rectest.TinyRun(t)
	meta := unfinish(t, b)
	status := "run B: " + meta.Status()
	for _, format := range []string{"table", "csv", "json"} {
		t.Run(format, func(t *testing.T) {
			out, errOut, err := runCmd(t, "diff", "--format", format, a, b)
			if err != nil {
				t.Fatal(err)
			}
			if want := "iocorr: warning: run B (" + b + "): " + meta.Status(); !strings.Contains(errOut, want) || strings.Contains(errOut, "run A (") {
				t.Errorf("stderr %q, want %q", errOut, want)
			}
			switch format {
			case "csv":
				if !strings.HasPrefix(out, "# "+status+"\r\n") {
					t.Errorf("CSV does not start with the status:\n%s", out)
				}
			case "json":
				var rows []map[string]any
				if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) == 0 {
					t.Fatalf("%d rows, %v", len(rows), err)
				}
				for _, r := range rows {
					if r["run_status"] != status {
						t.Fatalf("row %v: run_status is not %q", r, status)
					}
				}
			}
		})
	}
}
