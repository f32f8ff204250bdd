package store

import (
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/event"
)

// Group-by dimensions of a query.
// "request" is the llama.cpp sequence a token's batch serves
// (event.TokenInfo.Request): llama-server runs a request per sequence.
// A token whose batch serves several is split among them by their
// tokens in the batch (event.TokenInfo.Shares, event.Split).
var GroupBys = []string{"token", "tensor", "layer", "expert", "op", "phase", "request", "device"}

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
	Token uint32 // for By token, else 0
	Phase uint8  // for By token and phase, else 0
	// Selected is, for By expert, how often the router picked the expert
	// in the selected tokens and layers: set against its faults and reads
	// it shows how well the expert cache served.
	Selected uint64
	// Devices is, for By layer, where the layer's selected weights lived:
	// their distinct device names (event.Tensor.DeviceName) in name order,
	// joined by "+" ("CPU_Mapped+Vulkan0" for a layer whose experts
	// stayed in the mapped file and the rest went to the GPU); "" for a
	// pseudo tensor's row, which holds no weight.
	Devices string
	event.Counters
	order int // group order (token number, tensor id, layer...)
}

// Selected is the sort column of Row.Selected (queries by expert).
const Selected = "selected"

// SortColumns are the columns Query.Sort accepts: every counter by its
// name (event.CounterFields), and Selected; the sort is descending.
var SortColumns = func() []string {
	var cs []string
	for _, d := range event.CounterFields {
		cs = append(cs, d.Name)
	}
	return append(cs, Selected)
}()

// sortKey returns the value a sort column reads from a row, nil when the
// column is unknown.
func sortKey(col string) func(*Row) uint64 {
	if col == Selected {
		return func(r *Row) uint64 { return r.Selected }
	}
	if d, ok := event.CounterByName(col); ok {
		return func(r *Row) uint64 { return *d.Field(&r.Counters) }
	}
	return nil
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
		case t.Name == pattern: // also "[anonymous]", which is a glob too
		case glob:
			if ok, _ := path.Match(pattern, t.Name); !ok {
				continue
			}
		default:
			continue
		}
		if layer != nil && t.Layer != *layer {
			continue
		}
		ids[t.ID] = true
	}
	if len(ids) > 0 {
		return ids, nil
	}
	if pattern == "" {
		if layer != nil {
			return nil, fmt.Errorf("no tensor in layer %d (%s)", *layer, s.layerRange())
		}
		return ids, nil // a run of no model: every row is a pseudo tensor
	}
	for i := range s.Tensors {
		if ok, _ := path.Match(pattern, s.Tensors[i].Name); layer != nil && (ok || s.Tensors[i].Name == pattern) {
			// The name exists; the layer filter removed it.
			return nil, fmt.Errorf("%q matches no tensor of layer %d (%s)", pattern, *layer, s.layerRange())
		}
	}
	return nil, &UnknownTensorError{Name: pattern, Closest: s.closest(pattern, 3)}
}

// layerRange says which layers the model has, for error messages.
func (s *Store) layerRange() string {
	lo, hi := -1, -1
	for i := range s.Tensors {
		if l := s.Tensors[i].Layer; l >= 0 {
			if lo < 0 || l < lo {
				lo = l
			}
			hi = max(hi, l)
		}
	}
	if lo < 0 {
		return "the model has no layers"
	}
	return fmt.Sprintf("the model has layers %d-%d", lo, hi)
}

// closest returns the k tensor names nearest to name by edit distance.
// For a glob, layer numbers are globbed too (blk.7.x → blk.*.x), so that
// a mistyped pattern is answered with the pattern meant.
func (s *Store) closest(name string, k int) []string {
	type cand struct {
		name string
		d    int
	}
	glob := strings.ContainsAny(name, "*?[")
	seen := map[string]bool{}
	var cs []cand
	for i := range s.Tensors {
		t := &s.Tensors[i]
		if t.Pseudo() {
			continue
		}
		n := t.Name
		if glob && t.Layer >= 0 {
			n = strings.Replace(n, "blk."+strconv.Itoa(t.Layer)+".", "blk.*.", 1)
		}
		if seen[n] {
			continue
		}
		seen[n] = true
		cs = append(cs, cand{n, levenshtein(name, n)})
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
		slices.Sort(known)
		return nil, fmt.Errorf("unknown op %q (this run has: %s)", name, strings.Join(known, ", "))
	}
	return ids, nil
}

func parsePhase(p string) (uint8, error) {
	switch strings.ToLower(p) {
	case "prefill":
		return event.PhasePrefill, nil
	case "decode":
		return event.PhaseDecode, nil
	case "none":
		return event.PhaseNone, nil
	}
	return 0, fmt.Errorf("unknown phase %q (want prefill, decode or none)", p)
}

// Query runs q over the aggregates, in steps: validate the query, plan it
// against the store (tensors, ops and phase resolved, which table to read),
// scan the aggregates into groups, add the router's picks when grouping by
// expert, then order and cut the rows.
func (s *Store) Query(q Query) ([]Row, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	p, err := s.planQuery(q)
	if err != nil {
		return nil, err
	}
	groups := map[string]*Row{}
	if err := s.scanAggs(p, func(a *event.Agg, ph uint8) error {
		p.add(s, groups, a, ph)
		return nil
	}); err != nil {
		return nil, err
	}
	if p.by == "expert" {
		if err := s.addSelections(p, groups); err != nil {
			return nil, err
		}
	}
	if p.by == "request" {
		p.addShares(groups)
	}
	if p.by == "layer" {
		s.addLayerDevices(p, groups)
	}
	return p.rows(groups), nil
}

// DevicesNA are the device names of the run's weights that name no
// buffer (event.DeviceUnknown, event.DeviceUnnamed), each with why.
func (s *Store) DevicesNA() map[string]string {
	na := map[string]string{}
	for i := range s.Tensors {
		t := &s.Tensors[i]
		if why := event.DeviceNA(t.DeviceName()); why != "" && !t.Pseudo() {
			na[t.DeviceName()] = why
		}
	}
	return na
}

// addLayerDevices names, on each layer's row, the devices its selected
// weights lived on.
func (s *Store) addLayerDevices(p *queryPlan, groups map[string]*Row) {
	devs := map[int]map[string]bool{}
	for id := range p.tensors {
		t := &s.Tensors[id]
		if t.Pseudo() {
			continue
		}
		if devs[t.Layer] == nil {
			devs[t.Layer] = map[string]bool{}
		}
		devs[t.Layer][t.DeviceName()] = true
	}
	for _, r := range groups {
		// A pseudo tensor's row is keyed by its name; the weights of
		// no layer (token_embd, output) by -1.
		if layer, err := strconv.Atoi(r.Key); err == nil {
			r.Devices = strings.Join(slices.Sorted(maps.Keys(devs[layer])), "+")
		}
	}
}

// Validate checks what q says on its own, before the store is read;
// an empty By becomes "token".
func (q *Query) Validate() error {
	if q.By == "" {
		q.By = "token"
	}
	if !contains(GroupBys, q.By) {
		return fmt.Errorf("cannot group by %q (want one of %s)", q.By, strings.Join(GroupBys, ", "))
	}
	if q.Sort != "" && sortKey(q.Sort) == nil {
		return fmt.Errorf("cannot sort by %q (want one of %s)", q.Sort, strings.Join(SortColumns, ", "))
	}
	if q.Top < 0 {
		return fmt.Errorf("top must not be negative, got %d", q.Top)
	}
	if q.Token != nil && q.Token[0] > q.Token[1] {
		return fmt.Errorf("token range %d-%d is empty", q.Token[0], q.Token[1])
	}
	if q.Expert != nil && (*q.Expert < 0 || *q.Expert > 0x7ffe) {
		return fmt.Errorf("expert %d out of range", *q.Expert)
	}
	return nil
}

// queryPlan is a valid query resolved against the store.
type queryPlan struct {
	q       Query
	by      string
	sortKey func(*Row) uint64 // nil keeps the group order
	tensors map[uint32]bool
	ops     map[uint32]bool // nil: any op
	phase   int             // -1: any phase
	phaseOf map[uint32]uint8
	// requestOf is each token's request, for By request only; sharesOf
	// the sequences of a token shared by several, and shared what the
	// query selected of each such token, split among them at the end.
	requestOf map[uint32]string
	sharesOf  map[uint32][]event.Share
	shared    map[uint32]*event.Counters
	// totals is set when the query needs no token apart: neither selects
	// tokens nor groups by token or request. It then reads the run's
	// totals by phase, a row per tensor and phase, or per tensor, expert,
	// op and phase, however many tokens the run has (the finest rows of a
	// 30B-A3B run are 700 k for 51 tokens, its totals 53 k and 1.7 k).
	// fine is set when the query filters or groups by expert or op, which
	// only the finest rows (per token or phase) have; few when it selects
	// few enough tensors for a range scan each.
	totals, fine, few bool
}

func (s *Store) planQuery(q Query) (*queryPlan, error) {
	p := &queryPlan{q: q, by: q.By, phase: -1, phaseOf: map[uint32]uint8{}}
	if q.Sort != "" {
		p.sortKey = sortKey(q.Sort)
	}
	var err error
	if p.tensors, err = s.MatchTensors(q.Tensor, q.Layer, q.Pseudos); err != nil {
		return nil, err
	}
	if q.Op != "" {
		if p.ops, err = s.OpIDs(q.Op); err != nil {
			return nil, err
		}
	}
	if q.Phase != "" {
		ph, err := parsePhase(q.Phase)
		if err != nil {
			return nil, err
		}
		p.phase = int(ph)
	}
	p.totals = q.Token == nil && q.By != "token" && q.By != "request"
	p.fine = q.Expert != nil || p.ops != nil || p.by == "expert" || p.by == "op"
	p.few = len(p.tensors) < len(s.Tensors)/4
	if p.totals {
		return p, nil // the totals carry their phase
	}
	if q.By == "request" {
		p.requestOf, p.sharesOf, p.shared = map[uint32]string{}, map[uint32][]event.Share{}, map[uint32]*event.Counters{}
	}
	if err := s.EachToken(func(t *event.TokenInfo) error {
		p.phaseOf[t.Token] = t.Phase
		if p.requestOf != nil {
			p.requestOf[t.Token] = t.Request()
			if sh := t.Shares(); sh != nil {
				p.sharesOf[t.Token] = sh
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// scanAggs reads the aggregate rows the plan needs, each with its
// token's phase. The totals by phase answer every query that needs no
// token apart. Of either, the rows folded over experts and ops answer
// everything that neither filters nor groups by them, with far fewer rows
// to read (an MoE tensor has a row per expert touched per token or
// phase). A handful of tensors is a range scan each; most of the model,
// one scan of all.
func (s *Store) scanAggs(p *queryPlan, fn func(a *event.Agg, ph uint8) error) error {
	if p.totals {
		table, prefix, parse := ttPhaseTable, ttPhasePrefix, parseTTPhaseKey
		if p.fine {
			table, prefix, parse = aggPhaseTable, aggPhasePrefix, parseAggPhaseKey
		}
		if !p.few {
			return s.phaseAggScan(table, parse, fn)
		}
		for _, id := range sortedIDs(p.tensors) {
			if err := s.phaseAggScan(prefix(id), parse, fn); err != nil {
				return err
			}
		}
		return nil
	}
	return s.scanTokenAggs(p, func(a *event.Agg) error { return fn(a, p.phaseOf[a.Token]) })
}

// scanTokenAggs reads the rows per token the plan needs.
func (s *Store) scanTokenAggs(p *queryPlan, fn func(*event.Agg) error) error {
	switch {
	case !p.fine && p.few:
		for _, id := range sortedIDs(p.tensors) {
			if err := s.TensorTokenAggs(id, fn); err != nil {
				return err
			}
		}
		return nil
	case !p.fine:
		return s.allTensorTokenAggs(fn)
	case p.few:
		for _, id := range sortedIDs(p.tensors) {
			if err := s.AggsOfTensor(id, fn); err != nil {
				return err
			}
		}
		return nil
	case p.q.Token != nil && p.ops == nil && p.by != "op":
		// By or of experts, in a token range: the rows of those tokens
		// alone, ops folded, not the finest rows of every token.
		return s.tokenRangeAggs(p.q.Token[0], p.q.Token[1], fn)
	}
	return s.allFineAggs(fn)
}

// add charges a, of a token of phase ph, to its group when the query
// selects it.
func (p *queryPlan) add(s *Store, groups map[string]*Row, a *event.Agg, ph uint8) {
	q := &p.q
	if !p.tensors[a.Tensor] {
		return
	}
	if q.Token != nil && (a.Token < q.Token[0] || a.Token > q.Token[1]) {
		return
	}
	if q.Expert != nil && int(a.Expert) != *q.Expert {
		return
	}
	op := s.OpOf(a.Op, a.Tensor)
	if p.ops != nil && !p.ops[op] {
		return
	}
	if p.phase >= 0 && int(ph) != p.phase {
		return
	}
	if sh := p.sharesOf[a.Token]; sh != nil {
		// Split once per token, over everything selected of it: the
		// rows then sum to the token's own counters exactly.
		c := p.shared[a.Token]
		if c == nil {
			c = &event.Counters{}
			p.shared[a.Token] = c
		}
		c.Add(&a.Counters)
		return
	}
	key, order := p.group(s, a, op, ph)
	r := groups[key]
	if r == nil {
		r = &Row{Key: key, order: order}
		switch p.by {
		case "token":
			r.Token, r.Phase = a.Token, ph
		case "phase":
			r.Phase = ph
		}
		groups[key] = r
	}
	r.Counters.Add(&a.Counters)
}

// group is the group of a, whose op and phase are op and ph: its key and
// its place in the group order.
func (p *queryPlan) group(s *Store, a *event.Agg, op uint32, ph uint8) (key string, order int) {
	t := &s.Tensors[a.Tensor]
	switch p.by {
	case "token":
		return strconv.FormatUint(uint64(a.Token), 10), int(a.Token)
	case "tensor":
		return t.Name, int(a.Tensor)
	case "layer":
		if t.Pseudo() {
			return t.Name, -1 - int(t.ID)
		}
		return strconv.Itoa(t.Layer), t.Layer
	case "expert":
		return strconv.Itoa(int(a.Expert)), int(a.Expert)
	case "op":
		// By name: op ids number ops in the order they were first
		// seen, which changes from run to run.
		if key = s.OpName(op); key == "" {
			key = "[unknown]"
		}
		return key, 0
	case "phase":
		return event.PhaseName(ph), int(ph)
	case "device":
		// A weight no probe placed: never a device of "" or of zeros.
		if t.Pseudo() {
			return t.Name, -1 - int(t.ID)
		}
		if d := t.DeviceName(); event.DeviceNA(d) != "" {
			return d, 1 << 30
		}
		return t.Device, 0
	case "request":
		key, ok := p.requestOf[a.Token]
		if !ok {
			key = event.RequestNone
			if a.Token != 0 {
				key = event.RequestUnknown // a token of no llama_decode record
			}
		}
		return key, event.RequestOrder(key)
	}
	return "", 0
}

// addShares splits each shared token's selected counters among its
// sequences (event.Split) and charges each its part.
func (p *queryPlan) addShares(groups map[string]*Row) {
	for _, tok := range sortedIDs(mapKeys(p.shared)) {
		sh := p.sharesOf[tok]
		for i, part := range event.Split(p.shared[tok], sh) {
			key := strconv.Itoa(sh[i].Seq)
			r := groups[key]
			if r == nil {
				r = &Row{Key: key, order: event.RequestOrder(key)}
				groups[key] = r
			}
			r.Counters.Add(&part)
		}
	}
}

func mapKeys[V any](m map[uint32]V) map[uint32]bool {
	out := make(map[uint32]bool, len(m))
	for k := range m {
		out[k] = true
	}
	return out
}

// addSelections counts, per expert group, how often the router picked it
// in the selected tokens and expert layers: from the picks by phase when
// the plan reads the totals, else from the picks per token.
func (s *Store) addSelections(p *queryPlan, groups map[string]*Row) error {
	q := &p.q
	layers := map[int]bool{}
	for id := range p.tensors {
		if t := &s.Tensors[id]; t.Experts > 0 {
			layers[t.Layer] = true
		}
	}
	add := func(layer, expert uint16, ph uint8, n uint64) {
		if !layers[int(layer)] || (q.Expert != nil && int(expert) != *q.Expert) || (p.phase >= 0 && int(ph) != p.phase) {
			return
		}
		key := strconv.Itoa(int(expert))
		r := groups[key]
		if r == nil {
			// Picked but never charged anything: a perfect cache hit.
			r = &Row{Key: key, order: int(expert)}
			groups[key] = r
		}
		r.Selected += n
	}
	if p.totals {
		return s.phasePicks(func(pk phasePick) error {
			add(pk.Layer, pk.Expert, pk.Phase, pk.Count)
			return nil
		})
	}
	lo, hi := uint32(0), uint32(math.MaxUint32)
	if q.Token != nil {
		lo, hi = q.Token[0], q.Token[1]
	}
	return s.tokenRangeSelections(lo, hi, func(sel event.ExpertSel) error {
		add(sel.Layer, sel.Expert, p.phaseOf[sel.Token], sel.Count)
		return nil
	})
}

// rows are the groups in group order, then sorted (descending, stable)
// by the sort column and cut to Top.
func (p *queryPlan) rows(groups map[string]*Row) []Row {
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
	if key := p.sortKey; key != nil {
		sort.SliceStable(rows, func(i, j int) bool {
			return key(&rows[i]) > key(&rows[j])
		})
	}
	if p.q.Top > 0 && len(rows) > p.q.Top {
		rows = rows[:p.q.Top]
	}
	return rows
}

func sortedIDs(set map[uint32]bool) []uint32 {
	ids := make([]uint32, 0, len(set))
	for id := range set {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}
