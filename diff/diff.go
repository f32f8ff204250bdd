// Package diff compares two recorded runs in the manner of perf diff: the
// same query (store.Store.Query, grouped by tensor, layer, expert, op,
// phase, token or device) over both stores, side by side, with each counter's
// value in A (the baseline) and B, the change B − A and the ratio B / A.
//
// Runs of different models are compared by tensor name (and by layer,
// expert, op, phase, token number or device, which need no common model). A group
// that one run's model does not have is not a zero in that run: its value
// is NA with the reason, and the group says which run it is in. A counter
// a run could not measure (read syscalls not traced, router picks not
// probed) is NA for that run, as are its change and ratio; a ratio over a
// zero baseline is NA too, never an infinity or a zero.
//
// The package reads stores only through package store's queries and the
// run metadata's NA reasons (rundir), so the numbers are the ones `iocorr
// query` prints for each run.
package diff

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

// Run is one side of a comparison: a run as the read side opens it.
type Run = store.Run

// Options select what is compared.
type Options struct {
	// By is one of store.GroupBys; "" is tensor (perf diff's symbols).
	By string
	// Tensor is a name or glob selecting tensors in both runs; a run with
	// no tensor of it has NA for every group.
	Tensor string
	// Phase keeps events of one phase: prefill, decode or none.
	Phase string
	// Pseudos includes [other file], [anonymous] and [model header].
	Pseudos bool
	// Counters are the counters compared, by name (event.CounterFields,
	// and store.Selected when By is expert); nil compares them all.
	Counters []string
	// Sort, a counter of Counters, orders the groups by the size of its
	// change, largest first (groups whose change is NA last); "" keeps
	// the group order.
	Sort string
	// Top keeps the first Top groups, 0 all.
	Top int
}

// Side is one run's value of a counter in a group.
type Side struct {
	V  uint64
	NA string // why the run has no value; "" when measured
}

// Cell compares one counter of a group.
type Cell struct {
	Counter string
	Unit    event.Unit
	A, B    Side
	// Delta is B − A, Ratio B / A; each is meaningful only when its NA
	// reason is "".
	Delta            int64
	Ratio            float64
	DeltaNA, RatioNA string
}

// In says which runs have a group.
type In uint8

const (
	Both In = iota
	OnlyA
	OnlyB
)

func (p In) String() string {
	switch p {
	case OnlyA:
		return "a"
	case OnlyB:
		return "b"
	}
	return "both"
}

// Group is one row of the comparison: a group key (a tensor name, a
// layer, an expert, …) and its counters in both runs.
type Group struct {
	Key   string
	In    In
	Cells []Cell // in Result.Counters order
}

// Result is the comparison of two runs.
type Result struct {
	By       string
	Counters []string // compared counters, in Cells order
	Groups   []Group
	// OnlyA and OnlyB name the tensors (of those Options.Tensor selects)
	// that only one run's models have, in model order: the runs are of
	// different models, or of models of different shapes.
	OnlyA, OnlyB []string
	// StatusA and StatusB are the runs' status lines (rundir.Meta.Status).
	StatusA, StatusB string
}

// Status is both runs' status in one line, "" when both are complete.
func (r *Result) Status() string {
	var parts []string
	if r.StatusA != "" {
		parts = append(parts, "run A: "+r.StatusA)
	}
	if r.StatusB != "" {
		parts = append(parts, "run B: "+r.StatusB)
	}
	return strings.Join(parts, "; ")
}

// Counters lists the counters a comparison by by can compare: every
// counter, and the router's picks (store.Selected) by expert.
func Counters(by string) []string {
	var cs []string
	for _, d := range event.CounterFields {
		cs = append(cs, d.Name)
	}
	if by == "expert" {
		cs = append(cs, store.Selected)
	}
	return cs
}

// TableCounters are the counters a table compares by default: those a
// query's table shows (event.Counter.Table), and the router's picks by
// expert.
func TableCounters(by string) []string {
	var cs []string
	for _, d := range event.CounterFields {
		if d.Table {
			cs = append(cs, d.Name)
		}
	}
	if by == "expert" {
		cs = append(cs, store.Selected)
	}
	return cs
}

// Compare runs the query that o describes over a and b and puts the
// results side by side.
func Compare(a, b Run, o Options) (*Result, error) {
	if o.By == "" {
		o.By = "tensor"
	}
	if !slices.Contains(store.GroupBys, o.By) {
		return nil, fmt.Errorf("cannot compare by %q (want one of %s)", o.By, strings.Join(store.GroupBys, ", "))
	}
	all := Counters(o.By)
	counters := o.Counters
	if len(counters) == 0 {
		counters = all
	}
	for _, c := range counters {
		if !slices.Contains(all, c) {
			if c == store.Selected {
				return nil, fmt.Errorf("counter %q is only compared by expert", c)
			}
			return nil, fmt.Errorf("unknown counter %q (want one of %s)", c, strings.Join(all, ", "))
		}
	}
	if o.Sort != "" && !slices.Contains(counters, o.Sort) {
		return nil, fmt.Errorf("cannot sort by %q: it is not a compared counter (%s)", o.Sort, strings.Join(counters, ", "))
	}
	if o.Top < 0 {
		return nil, fmt.Errorf("top must not be negative, got %d", o.Top)
	}
	sa, err := side(a, "A", o)
	if err != nil {
		return nil, fmt.Errorf("run A: %w", err)
	}
	sb, err := side(b, "B", o)
	if err != nil {
		return nil, fmt.Errorf("run B: %w", err)
	}
	if sa.noMatch != "" && sb.noMatch != "" {
		return nil, fmt.Errorf("no tensor of either run matches %q", o.Tensor)
	}
	res := &Result{By: o.By, Counters: counters, StatusA: a.Meta.Status(), StatusB: b.Meta.Status()}
	res.OnlyA, res.OnlyB = onlyIn(sa, sb), onlyIn(sb, sa)
	for _, key := range mergeKeys(o.By, sa.keys, sb.keys) {
		g := Group{Key: key}
		naA, naB := sa.missing(key), sb.missing(key)
		switch {
		case naA != "" && naB != "":
			// Both queries found the group, so both runs have it; kept
			// for safety against a store that disagrees with itself.
			return nil, fmt.Errorf("internal: group %q is in neither run (%s; %s)", key, naA, naB)
		case naA != "":
			g.In = OnlyB
		case naB != "":
			g.In = OnlyA
		}
		for _, c := range counters {
			g.Cells = append(g.Cells, compare(c, sa.value(key, c, naA), sb.value(key, c, naB)))
		}
		res.Groups = append(res.Groups, g)
	}
	if o.Sort != "" {
		ci := slices.Index(counters, o.Sort)
		slices.SortStableFunc(res.Groups, func(x, y Group) int {
			cx, cy := &x.Cells[ci], &y.Cells[ci]
			switch {
			case cx.DeltaNA != "" || cy.DeltaNA != "":
				return boolCmp(cx.DeltaNA != "", cy.DeltaNA != "")
			}
			return cmp.Compare(absDelta(cy.Delta), absDelta(cx.Delta))
		})
	}
	if o.Top > 0 && len(res.Groups) > o.Top {
		res.Groups = res.Groups[:o.Top]
	}
	return res, nil
}

func absDelta(d int64) uint64 {
	if d < 0 {
		return uint64(-d)
	}
	return uint64(d)
}

// boolCmp orders false before true.
func boolCmp(x, y bool) int {
	switch {
	case x == y:
		return 0
	case x:
		return 1
	}
	return -1
}

// compare fills a cell from both sides.
func compare(counter string, a, b Side) Cell {
	c := Cell{Counter: counter, A: a, B: b, Unit: event.UnitCount}
	if d, ok := event.CounterByName(counter); ok {
		c.Unit = d.Unit
	}
	switch {
	case a.NA != "" && b.NA != "":
		c.DeltaNA = "run A: " + a.NA + "; run B: " + b.NA
	case a.NA != "":
		c.DeltaNA = "run A: " + a.NA
	case b.NA != "":
		c.DeltaNA = "run B: " + b.NA
	}
	if c.DeltaNA != "" {
		c.RatioNA = c.DeltaNA
		return c
	}
	c.Delta = int64(b.V) - int64(a.V)
	switch {
	case a.V == 0 && b.V == 0:
		c.RatioNA = "no ratio: 0 in both runs"
	case a.V == 0:
		c.RatioNA = "no ratio: the baseline (run A) is 0"
	default:
		c.Ratio = float64(b.V) / float64(a.V)
		if math.IsInf(c.Ratio, 0) || math.IsNaN(c.Ratio) {
			c.RatioNA = "no ratio: out of range"
		}
	}
	return c
}

// runSide is one run's query result and what its model has.
type runSide struct {
	name string // "A" or "B"
	meta *rundir.Meta
	by   string
	rows map[string]*store.Row
	keys []string // query rows' keys, in the query's group order
	// has lists the groups the run's model (and record) has: a group
	// missing from the query but in has is a measured zero.
	has map[string]bool
	// hasWhy says, for a group not in has, why (one line for the run).
	hasWhy string
	// noMatch is set when Options.Tensor selects no tensor of this run.
	noMatch string
	tensors []string // names of the selected real tensors, in model order
	// picksNA says why the run's picks in the compared phase are not
	// all known (rundir.Meta.PicksNA, store.Summary.PicksNAOf).
	picksNA string
}

// side queries one run and gathers the groups its model has.
func side(r Run, name string, o Options) (*runSide, error) {
	s := &runSide{name: name, meta: r.Meta, by: o.By, rows: map[string]*store.Row{}, has: map[string]bool{}}
	st := r.Store
	ids, err := st.MatchTensors(o.Tensor, nil, o.Pseudos)
	var unknown *store.UnknownTensorError
	switch {
	case errors.As(err, &unknown):
		s.noMatch = fmt.Sprintf("no tensor of run %s matches %q", name, o.Tensor)
		return s, nil
	case err != nil:
		return nil, err
	}
	q := store.Query{By: o.By, Tensor: o.Tensor, Phase: o.Phase, Pseudos: o.Pseudos}
	rows, err := st.Query(q)
	if err != nil {
		return nil, err
	}
	s.picksNA = r.PicksNA(&q)
	for i := range rows {
		s.rows[rows[i].Key] = &rows[i]
		s.keys = append(s.keys, rows[i].Key)
		s.has[rows[i].Key] = true
	}
	var lo, hi, experts int = -1, -1, 0
	for i := range st.Tensors {
		t := &st.Tensors[i]
		if !ids[t.ID] {
			continue
		}
		if !t.Pseudo() {
			s.tensors = append(s.tensors, t.Name)
		}
		switch o.By {
		case "tensor":
			s.has[t.Name] = true
		case "layer":
			if t.Pseudo() {
				s.has[t.Name] = true
			} else {
				s.has[strconv.Itoa(t.Layer)] = true
				if t.Layer >= 0 {
					if lo < 0 || t.Layer < lo {
						lo = t.Layer
					}
					hi = max(hi, t.Layer)
				}
			}
		case "expert":
			experts = max(experts, t.Experts)
		case "device":
			// As query groups it: a pseudo tensor by its name, a weight
			// no probe placed under event.DeviceUnknown.
			if t.Pseudo() {
				s.has[t.Name] = true
			} else {
				s.has[t.DeviceName()] = true
			}
		}
	}
	switch o.By {
	case "tensor":
		s.hasWhy = "the tensor is not in run " + name + "'s model"
	case "layer":
		s.hasWhy = "run " + name + "'s model has no such layer"
		if hi >= 0 {
			s.hasWhy = fmt.Sprintf("run %s's model has layers %d-%d", name, lo, hi)
		}
	case "expert":
		// -1 is the bytes of tensors without experts, which any model
		// may have.
		s.has["-1"] = true
		for e := range experts {
			s.has[strconv.Itoa(e)] = true
		}
		s.hasWhy = fmt.Sprintf("run %s's model has %d experts per layer", name, experts)
	case "device":
		s.hasWhy = "no weight of run " + name + " lived on this device"
	case "op":
		// Ops are charged by name; an op the run never recorded a node
		// of could not be charged anything.
		s.has["[unknown]"] = true
		for _, op := range st.Ops {
			if op != "" {
				s.has[op] = true
			}
		}
		s.hasWhy = "run " + name + " recorded no graph node of this op"
	case "phase", "token":
		// Outside every llama_decode call (token 0, phase none) is the
		// load and the exit, which every run has.
		s.has[event.PhaseName(event.PhaseNone)] = true
		s.has["0"] = true
		n := 0
		if err := st.EachToken(func(t *event.TokenInfo) error {
			s.has[event.PhaseName(t.Phase)] = true
			s.has[strconv.FormatUint(uint64(t.Token), 10)] = true
			n++
			return nil
		}); err != nil {
			return nil, err
		}
		if o.By == "phase" {
			s.hasWhy = "run " + name + " has no token of this phase"
		} else {
			s.hasWhy = fmt.Sprintf("run %s has %d llama_decode calls", name, n)
		}
	}
	return s, nil
}

// missing says why the run has no value for the group key, "" when it has.
func (s *runSide) missing(key string) string {
	switch {
	case s.noMatch != "":
		return s.noMatch
	case s.has[key]:
		return ""
	}
	return s.hasWhy
}

// value is the run's value of counter in group key; na, when set, is why
// the run has no such group.
func (s *runSide) value(key, counter, na string) Side {
	if na != "" {
		return Side{NA: na}
	}
	why := s.picksNA
	if counter != store.Selected {
		why = s.meta.CounterNA(counter)
	}
	if why != "" {
		return Side{NA: why}
	}
	r := s.rows[key]
	if r == nil {
		return Side{} // the run has the group and charged it nothing
	}
	if counter == store.Selected {
		return Side{V: r.Selected}
	}
	d, _ := event.CounterByName(counter)
	return Side{V: *d.Field(&r.Counters)}
}

// onlyIn lists the tensors of x that y's models do not have.
func onlyIn(x, y *runSide) []string {
	if y.noMatch != "" {
		return slices.Clone(x.tensors)
	}
	in := make(map[string]bool, len(y.tensors))
	for _, n := range y.tensors {
		in[n] = true
	}
	var out []string
	for _, n := range x.tensors {
		if !in[n] {
			out = append(out, n)
		}
	}
	return out
}

// mergeKeys puts the groups of both runs in one order: numerically for
// tokens, layers and experts (pseudo tensors' names first, as query puts
// them), else A's order followed by what only B has.
func mergeKeys(by string, a, b []string) []string {
	seen := map[string]bool{}
	var keys []string
	for _, list := range [][]string{a, b} {
		for _, k := range list {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
	}
	switch by {
	case "token", "layer", "expert":
		slices.SortStableFunc(keys, func(x, y string) int {
			nx, ex := strconv.ParseInt(x, 10, 64)
			ny, ey := strconv.ParseInt(y, 10, 64)
			switch {
			case ex != nil || ey != nil:
				return boolCmp(ex == nil, ey == nil)
			}
			return cmp.Compare(nx, ny)
		})
	case "phase":
		order := map[string]int{"none": 0, "prefill": 1, "decode": 2}
		slices.SortStableFunc(keys, func(x, y string) int { return cmp.Compare(order[x], order[y]) })
	}
	return keys
}
