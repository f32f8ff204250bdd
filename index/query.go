package index

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/correlate"
)

// Group-by dimensions of a query.
var GroupBys = []string{"token", "tensor", "layer", "expert", "op", "phase"}

// Query selects aggregate rows and groups them. Zero values select all.
type Query struct {
	Tensor  string // exact name or glob (path.Match syntax)
	Token   *[2]uint32
	Layer   *int
	Expert  *int
	Op      string // op name, case-insensitive
	Phase   string // prefill, decode, none
	By      string // one of GroupBys; "" is token
	Sort    string // a column of SortColumns; "" keeps the group order
	Top     int    // keep the first Top rows after sorting, 0 keeps all
	Pseudos bool   // include [other file], [anonymous], [model header] when Tensor is ""
}

// Row is one group of a query result.
type Row struct {
	Key   string // the group's value as text
	Token uint32 // for By token
	Phase uint8  // for By token and phase
	// Selected is, for By expert, how often the router picked the expert
	// in the selected tokens and layers: set against its faults and reads
	// it shows how well the expert cache served.
	Selected uint64
	correlate.Counters
	order int // group order (token number, tensor id, layer...)
}

// SortColumns are the columns Query.Sort accepts; the sort is descending.
var SortColumns = []string{"faults", "major", "minor", "stall", "added", "trigger", "evicted", "read", "requests"}

func sortValue(c *correlate.Counters, col string) uint64 {
	switch col {
	case "faults":
		return c.Faults
	case "major":
		return c.Major
	case "minor":
		return c.Minor
	case "stall":
		return c.StallNS
	case "added":
		return c.AddedBytes
	case "trigger":
		return c.TriggerBytes
	case "evicted":
		return c.EvictedBytes
	case "read":
		return c.ReadBytes
	case "requests":
		return c.BlockReqs
	}
	return 0
}

// UnknownTensorError names a tensor that matched nothing and the closest names.
type UnknownTensorError struct {
	Name    string
	Closest []string
}

func (e *UnknownTensorError) Error() string {
	if len(e.Closest) == 0 {
		return fmt.Sprintf("unknown tensor %q", e.Name)
	}
	return fmt.Sprintf("unknown tensor %q (closest: %s)", e.Name, strings.Join(e.Closest, ", "))
}

// MatchTensors returns the ids of tensors named by pattern (exact or glob)
// and layer; an error of type *UnknownTensorError when none match.
func (s *Store) MatchTensors(pattern string, layer *int, pseudos bool) (map[uint32]bool, error) {
	ids := map[uint32]bool{}
	glob := strings.ContainsAny(pattern, "*?[")
	if glob {
		if _, err := path.Match(pattern, ""); err != nil {
			return nil, fmt.Errorf("bad tensor pattern %q: %w", pattern, err)
		}
	}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		switch {
		case pattern == "":
			if t.Pseudo() && !pseudos {
				continue
			}
		case glob:
			if ok, _ := path.Match(pattern, t.Name); !ok {
				continue
			}
		default:
			if t.Name != pattern {
				continue
			}
		}
		if layer != nil && t.Layer != *layer {
			continue
		}
		ids[t.ID] = true
	}
	if len(ids) == 0 && pattern != "" {
		matched := false
		for i := range s.Tensors {
			if ok, _ := path.Match(pattern, s.Tensors[i].Name); ok || s.Tensors[i].Name == pattern {
				matched = true
			}
		}
		if matched { // the name exists; the layer filter removed it
			return nil, fmt.Errorf("tensor %q has no tensor in layer %d", pattern, *layer)
		}
		return nil, &UnknownTensorError{Name: pattern, Closest: s.closest(pattern, 3)}
	}
	return ids, nil
}

func (s *Store) closest(name string, k int) []string {
	type cand struct {
		name string
		d    int
	}
	var cs []cand
	for i := range s.Tensors {
		if s.Tensors[i].Pseudo() {
			continue
		}
		cs = append(cs, cand{s.Tensors[i].Name, levenshtein(name, s.Tensors[i].Name)})
	}
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].d < cs[j].d })
	var out []string
	for i := 0; i < len(cs) && i < k; i++ {
		out = append(out, cs[i].name)
	}
	return out
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// OpIDs returns the ids of op name (case-insensitive), or an error listing
// the ops the run knows.
func (s *Store) OpIDs(name string) (map[uint32]bool, error) {
	ids := map[uint32]bool{}
	for id, n := range s.Ops {
		if n != "" && strings.EqualFold(n, name) {
			ids[uint32(id)] = true
		}
	}
	if len(ids) == 0 {
		known := append([]string(nil), s.Ops...)
		if len(known) > 0 && known[0] == "" {
			known = known[1:]
		}
		if len(known) == 0 {
			return nil, fmt.Errorf("unknown op %q: this run has no op names (no graph nodes or op probes were recorded)", name)
		}
		return nil, fmt.Errorf("unknown op %q (this run has: %s)", name, strings.Join(known, ", "))
	}
	return ids, nil
}

func parsePhase(p string) (uint8, error) {
	switch strings.ToLower(p) {
	case "prefill":
		return correlate.PhasePrefill, nil
	case "decode":
		return correlate.PhaseDecode, nil
	case "none":
		return correlate.PhaseNone, nil
	}
	return 0, fmt.Errorf("unknown phase %q (want prefill, decode or none)", p)
}

// Query runs q over the aggregates.
func (s *Store) Query(q Query) ([]Row, error) {
	by := q.By
	if by == "" {
		by = "token"
	}
	if !contains(GroupBys, by) {
		return nil, fmt.Errorf("cannot group by %q (want one of %s)", by, strings.Join(GroupBys, ", "))
	}
	if q.Sort != "" && !contains(SortColumns, q.Sort) {
		return nil, fmt.Errorf("cannot sort by %q (want one of %s)", q.Sort, strings.Join(SortColumns, ", "))
	}
	tensors, err := s.MatchTensors(q.Tensor, q.Layer, q.Pseudos)
	if err != nil {
		return nil, err
	}
	var ops map[uint32]bool
	if q.Op != "" {
		if ops, err = s.OpIDs(q.Op); err != nil {
			return nil, err
		}
	}
	phase := -1
	if q.Phase != "" {
		p, err := parsePhase(q.Phase)
		if err != nil {
			return nil, err
		}
		phase = int(p)
	}
	toks, err := s.Tokens()
	if err != nil {
		return nil, err
	}
	phaseOf := map[uint32]uint8{}
	for _, t := range toks {
		phaseOf[t.Token] = t.Phase
	}
	groups := map[string]*Row{}
	add := func(a *correlate.Agg) error {
		if !tensors[a.Tensor] {
			return nil
		}
		if q.Token != nil && (a.Token < q.Token[0] || a.Token > q.Token[1]) {
			return nil
		}
		if q.Expert != nil && int(a.Expert) != *q.Expert {
			return nil
		}
		op := s.OpOf(a.Op, a.Tensor)
		if ops != nil && !ops[op] {
			return nil
		}
		ph := phaseOf[a.Token]
		if phase >= 0 && int(ph) != phase {
			return nil
		}
		var key string
		order := 0
		t := &s.Tensors[a.Tensor]
		switch by {
		case "token":
			key, order = strconv.FormatUint(uint64(a.Token), 10), int(a.Token)
		case "tensor":
			key, order = t.Name, int(a.Tensor)
		case "layer":
			key, order = strconv.Itoa(t.Layer), t.Layer
			if t.Pseudo() {
				key, order = t.Name, -1-int(t.ID)
			}
		case "expert":
			key, order = strconv.Itoa(int(a.Expert)), int(a.Expert)
		case "op":
			key, order = s.OpName(op), int(op)
			if key == "" {
				key = "[unknown]"
			}
		case "phase":
			key, order = correlate.PhaseName(ph), int(ph)
		}
		r := groups[key]
		if r == nil {
			r = &Row{Key: key, Token: a.Token, Phase: ph, order: order}
			groups[key] = r
		}
		r.Counters.Add(&a.Counters)
		return nil
	}
	// A tensor selection is a range scan per tensor; everything else is
	// one scan of the aggregates.
	if len(tensors) < len(s.Tensors)/2 {
		for id := range tensors {
			if err := s.AggsOfTensor(id, add); err != nil {
				return nil, err
			}
		}
	} else if err := s.Aggs(add); err != nil {
		return nil, err
	}
	if by == "expert" {
		layers := map[int]bool{}
		for id := range tensors {
			if t := &s.Tensors[id]; t.Experts > 0 {
				layers[t.Layer] = true
			}
		}
		err := s.ExpertSelections(func(sel correlate.ExpertSel) error {
			if !layers[int(sel.Layer)] || (q.Token != nil && (sel.Token < q.Token[0] || sel.Token > q.Token[1])) ||
				(q.Expert != nil && int(sel.Expert) != *q.Expert) || (phase >= 0 && int(phaseOf[sel.Token]) != phase) {
				return nil
			}
			key := strconv.Itoa(int(sel.Expert))
			r := groups[key]
			if r == nil {
				// Picked but never charged anything: a perfect cache hit.
				r = &Row{Key: key, order: int(sel.Expert)}
				groups[key] = r
			}
			r.Selected += sel.Count
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	rows := make([]Row, 0, len(groups))
	for _, r := range groups {
		rows = append(rows, *r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].order != rows[j].order {
			return rows[i].order < rows[j].order
		}
		return rows[i].Key < rows[j].Key
	})
	if q.Sort != "" {
		sort.SliceStable(rows, func(i, j int) bool {
			return sortValue(&rows[i].Counters, q.Sort) > sortValue(&rows[j].Counters, q.Sort)
		})
	}
	if q.Top > 0 && len(rows) > q.Top {
		rows = rows[:q.Top]
	}
	return rows, nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
