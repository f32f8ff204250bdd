//go:build linux

package diff_test

import (
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// The recorder re-executes this test binary as the held child of the
// second recorded run (rectest.RecordedPair).
func TestMain(m *testing.M) { rectest.Main(m) }

// queried is one run's query by one grouping, as `iocorr query --by BY`
// prints it: each group's counters, and the counters its metadata says
// were not measured (NA, printed as null).
type queried struct {
	rows map[string]*store.Row
	run  diff.Run
}

func query(t *testing.T, r diff.Run, by string) queried {
	t.Helper()
	rows, err := r.Store.Query(store.Query{By: by})
	if err != nil {
		t.Fatalf("query by %s: %v", by, err)
	}
	q := queried{rows: map[string]*store.Row{}, run: r}
	for i := range rows {
		q.rows[rows[i].Key] = &rows[i]
	}
	return q
}

// value is the query's value of counter in group key; ok is false where
// the run did not measure the counter.
func (q queried) value(t *testing.T, key, counter string) (v uint64, ok bool) {
	t.Helper()
	r := q.rows[key]
	if counter == store.Selected {
		return r.Selected, q.run.Meta.PicksNA() == ""
	}
	if q.run.Meta.CounterNA(counter) != "" {
		return 0, false
	}
	d, found := event.CounterByName(counter)
	if !found {
		t.Fatalf("no counter %s", counter)
	}
	return *d.Field(&r.Counters), true
}

// TestCompareOfTwoRecordedRunsIsTheDifferenceOfTheirQueries: for every
// grouping, the comparison of two real runs of different models has a
// group per group of either run's query and a cell per counter, whose A
// and B are the two queries' values (0 for a group the run has but
// charged nothing, NA for one its model has not: layers 6-7, experts 4-7,
// the tensors of layers 6-7), delta B − A and ratio B / A, or NA with a
// reason for a zero baseline.
func TestCompareOfTwoRecordedRunsIsTheDifferenceOfTheirQueries(t *testing.T) {
	a, b, modelA, modelB := rectest.RecordedPair(t)
	namesA, namesB := rectest.TensorNames(t, modelA), rectest.TensorNames(t, modelB)
	// onlyA says, independently of iocorr, whether a group exists only in
	// the model of run A (by the models' shapes).
	onlyA := map[string]func(key string) bool{
		"tensor": func(k string) bool { return namesA[k] && !namesB[k] },
		"layer": func(k string) bool {
			l, err := strconv.Atoi(k)
			return err == nil && l >= rectest.SmallerMoE.Layers
		},
		"expert": func(k string) bool {
			e, err := strconv.Atoi(k)
			return err == nil && e >= rectest.SmallerMoE.Experts
		},
	}
	runA, runB := *storetest.OpenRun(t, a), *storetest.OpenRun(t, b)
	for _, by := range store.GroupBys {
		t.Run("by "+by, func(t *testing.T) {
			qa, qb := query(t, runA, by), query(t, runB, by)
			counters := diff.Counters(by)
			res, err := diff.Compare(runA, runB, diff.Options{By: by})
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			var inA, inB, cells int
			for _, g := range res.Groups {
				key, in := g.Key, g.In.String()
				for _, c := range g.Cells {
					cells++
					counter := c.Counter
					seen[key]++
					if f := onlyA[by]; f != nil && (in == "a") != f(key) {
						t.Errorf("%s %s: in %q, but only in A's model: %v", by, key, in, f(key))
					}
					// What each query says, or 0 for a group a run has and
					// charged nothing, or NA for one it has not.
					expect := func(q queried, missing bool) (uint64, bool) {
						_, ok := q.rows[key]
						switch {
						case missing:
							if ok {
								t.Errorf("%s %s: in %q, but that run's query has it", by, key, in)
							}
							return 0, false
						case !ok:
							return 0, true
						}
						return q.value(t, key, counter)
					}
					wa, okA := expect(qa, in == "b")
					wb, okB := expect(qb, in == "a")
					gotA, gotB := c.A.NA == "", c.B.NA == ""
					if c.A.V != wa || gotA != okA || c.B.V != wb || gotB != okB {
						t.Errorf("%s %s %s: a %+v b %+v, the queries say %d (%v) and %d (%v)", by, key, counter, c.A, c.B, wa, okA, wb, okB)
						continue
					}
					if okA {
						inA++
					}
					if okB {
						inB++
					}
					if !okA || !okB {
						if c.DeltaNA == "" || c.RatioNA == "" {
							t.Errorf("%s %s %s: a value is NA, but delta %d (NA %q), ratio %v (NA %q)", by, key, counter, c.Delta, c.DeltaNA, c.Ratio, c.RatioNA)
						}
						continue
					}
					if c.DeltaNA != "" || c.Delta != int64(wb)-int64(wa) {
						t.Errorf("%s %s %s: delta %d (NA %q), want %d", by, key, counter, c.Delta, c.DeltaNA, int64(wb)-int64(wa))
					}
					if wa == 0 {
						if c.RatioNA == "" || !strings.Contains(c.RatioNA, "no ratio") {
							t.Errorf("%s %s %s: ratio %v over a zero baseline, reason %q", by, key, counter, c.Ratio, c.RatioNA)
						}
						continue
					}
					if want := float64(wb) / float64(wa); c.RatioNA != "" || math.Abs(c.Ratio-want) > 1e-12*want {
						t.Errorf("%s %s %s: ratio %v (NA %q), want %g", by, key, counter, c.Ratio, c.RatioNA, want)
					}
				}
			}
			for _, q := range []queried{qa, qb} {
				for key := range q.rows {
					if seen[key] != len(counters) {
						t.Errorf("%s %s: %d cells, want one per counter (%d)", by, key, seen[key], len(counters))
					}
				}
			}
			both := 0
			for k := range qa.rows {
				if _, ok := qb.rows[k]; ok {
					both++
				}
			}
			if len(seen) != len(qa.rows)+len(qb.rows)-both {
				t.Errorf("%d groups, the queries have %d and %d (%d in both)", len(seen), len(qa.rows), len(qb.rows), both)
			}
			if inA == 0 || inB == 0 {
				t.Errorf("no value measured in A (%d) or B (%d)", inA, inB)
			}
			t.Logf("by %s: %d groups (A %d, B %d), %d cells", by, len(seen), len(qa.rows), len(qb.rows), cells)
		})
	}
}
