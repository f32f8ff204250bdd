package storetest

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
)

// OracleRow is one group as the oracle sums it.
type OracleRow struct {
	Selected uint64
	event.Counters
}

// QueryOracle answers q (grouped by expert, layer, tensor, device, op or
// phase) by summing the store's rows per token by hand: every (token,
// tensor, expert, op) row of the tensors q selects (Store.AggsOfTensor),
// each token's phase from its own row (a token without one is phase
// none), and, by expert, the router's picks per token
// (Store.ExpertSelections) of the selected tensors' layers. It shares with
// Query only the tensor and op name lookups.
func QueryOracle(t testing.TB, st *store.Store, q store.Query) map[string]OracleRow {
	t.Helper()
	ids, err := st.MatchTensors(q.Tensor, q.Layer, q.Pseudos)
	if err != nil {
		t.Fatal(err)
	}
	var ops map[uint32]bool
	if q.Op != "" {
		if ops, err = st.OpIDs(q.Op); err != nil {
			t.Fatal(err)
		}
	}
	phase := map[uint32]uint8{}
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		phase[tk.Token] = tk.Phase
	}
	keep := func(tok uint32, expert int) bool {
		return (q.Phase == "" || event.PhaseName(phase[tok]) == q.Phase) && (q.Expert == nil || expert == *q.Expert) &&
			(q.Token == nil || (q.Token[0] <= tok && tok <= q.Token[1]))
	}
	out := map[string]OracleRow{}
	for id := range ids {
		tn := st.Tensor(id)
		if err := st.AggsOfTensor(id, func(a *event.Agg) error {
			op := st.OpOf(a.Op, a.Tensor)
			if !keep(a.Token, int(a.Expert)) || (ops != nil && !ops[op]) {
				return nil
			}
			var key string
			switch q.By {
			case "expert":
				key = strconv.Itoa(int(a.Expert))
			case "layer":
				key = strconv.Itoa(tn.Layer)
			case "tensor":
				key = tn.Name
			case "device":
				key = tn.DeviceName()
			case "op":
				if key = st.OpName(op); key == "" {
					key = "[unknown]"
				}
			case "phase":
				key = event.PhaseName(phase[a.Token])
			default:
				t.Fatalf("the oracle does not group by %q", q.By)
			}
			if tn.Pseudo() && (q.By == "layer" || q.By == "device") {
				key = tn.Name
			}
			r := out[key]
			r.Counters.Add(&a.Counters)
			out[key] = r
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	if q.By != "expert" {
		return out
	}
	layers := map[int]bool{}
	for id := range ids {
		if tn := st.Tensor(id); tn.Experts > 0 {
			layers[tn.Layer] = true
		}
	}
	if err := st.ExpertSelections(func(s event.ExpertSel) error {
		if layers[int(s.Layer)] && keep(s.Token, int(s.Expert)) {
			key := strconv.Itoa(int(s.Expert))
			r := out[key]
			r.Selected += s.Count
			out[key] = r
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// OracleQueries are the queries CheckQueries runs: every grouping of
// QueryOracle, unfiltered and under each filter (token ranges too),
// sorted and cut once.
func OracleQueries(st *store.Store) []store.Query {
	one := 1
	var qs []store.Query
	filters := []store.Query{{}, {Phase: "decode"}, {Phase: "prefill"}, {Phase: "none"}, {Pseudos: true},
		{Tensor: "blk.*.ffn_*_exps.weight"}, {Layer: &one}, {Expert: &one}, {Tensor: "blk.1.*", Phase: "decode", Expert: &one},
		{Token: &[2]uint32{1, 1}}, {Token: &[2]uint32{2, 3}, Pseudos: true}, {Token: &[2]uint32{0, 2}, Phase: "prefill", Expert: &one}}
	for _, op := range st.Ops {
		if op != "" {
			filters = append(filters, store.Query{Op: op})
		}
	}
	for _, by := range []string{"expert", "layer", "tensor", "device", "op", "phase"} {
		for _, f := range filters {
			f.By = by
			qs = append(qs, f)
		}
	}
	return append(qs, store.Query{By: "expert", Sort: store.Selected, Top: 3}, store.Query{By: "tensor", Sort: "faults", Top: 5})
}

// CheckQueries runs OracleQueries on st and fails t where a result
// differs, uncut, from QueryOracle, or, for a query of no token filter
// (which st answers from its totals by phase), from the same query over
// every token (Query's path through the rows per token: the rows equal,
// in the same order). It returns how many queries it compared.
func CheckQueries(t *testing.T, st *store.Store) int {
	t.Helper()
	n := 0
	for _, q := range OracleQueries(st) {
		name := fmt.Sprintf("%+v", q)
		if q.Token != nil {
			name += fmt.Sprintf(" tokens %d-%d", q.Token[0], q.Token[1])
		}
		got, err := st.Query(q)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		n++
		if q.Token == nil {
			perToken := q
			perToken.Token = &[2]uint32{0, math.MaxUint32}
			want, err := st.Query(perToken)
			if err != nil {
				t.Fatalf("%s over every token: %v", name, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: from the totals\n%+v\nover every token\n%+v", name, got, want)
			}
		}
		if q.Top > 0 {
			continue
		}
		rows := map[string]OracleRow{}
		for _, r := range got {
			rows[r.Key] = OracleRow{Selected: r.Selected, Counters: r.Counters}
		}
		if oracle := QueryOracle(t, st, q); !reflect.DeepEqual(rows, oracle) {
			t.Errorf("%s: the query\n%+v\nthe oracle\n%+v", name, rows, oracle)
		}
	}
	return n
}
