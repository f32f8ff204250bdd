package predict

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/store"
)

// The recommendations a plan makes.
const (
	Pin        = "pin"
	PinNothing = "pin nothing"
)

// minGain is how much fewer decode bytes a plan must be predicted to read
// than the kernel's policy for it to be worth pinning: below it the
// model's own error (docs: a few per cent at the budgets measured) could
// turn the gain into a loss.
const minGain = 0.05

// MakePlan ranks what to pin of the run's model under budget and keeps
// the pinning the prediction ranks best. The grains are whole tensors and
// expert slices, ordered by stall saved per byte: how many decode calls
// read a grain (what every token reads first, then the experts the router
// picks most), then how often the kernel's policy re-read its pages. It
// tries the ranking's prefixes that fill a tenth, two tenths … nine tenths
// of the page cache the budget leaves, predicts each, and recommends the
// best only where it beats the kernel's policy; otherwise the plan pins
// nothing and says why. readahead is the read-around window in bytes, as
// Options.Readahead (0: the kernel's).
//
// Where the run's readers race (Result.Modes), a pinning must read fewer
// bytes and more tokens/s in both modes to be recommended. The plan's
// Prefetch says whether a prefetcher pays at the budget (Run.advise).
func MakePlan(run *store.Run, budget, readahead int64) (*pin.Plan, error) {
	snaps, err := run.Snapshots()
	if err != nil {
		return nil, err
	}
	r, err := Load(run, snaps)
	if err != nil {
		return nil, err
	}
	p, err := r.plan(budget, readahead, ModelIdentity(&run.Meta.Models[0]), run.Store.Tensors)
	if err != nil {
		return nil, err
	}
	p.Prefetch = r.advise(budget, readahead, run.Meta.Command)
	p.Readahead = r.adviseReadahead(budget, run.Meta.Command)
	return p, nil
}

func (r *Run) plan(budget, readahead int64, id pin.ModelID, tensors []event.Tensor) (*pin.Plan, error) {
	if why := cmp.Or(r.noFigures, r.picksNA); why != "" {
		return nil, fmt.Errorf("no plan can be predicted: %s", why)
	}
	capacity := r.capacityPages(budget, 0)
	if capacity <= 0 {
		return nil, fmt.Errorf("the budget %d is below the run's non-file memory (%d bytes)", budget, r.NonFile)
	}
	ra := r.window(readahead)
	base, cache := r.simulate(capacity, ra, nil, true)
	decode := r.byPhase[event.PhaseDecode]
	reread := func(u unit) float64 {
		var n uint64
		for p := u.r.first; p < u.r.end; p++ {
			n += uint64(cache.readBy[p])
		}
		return float64(n) / float64(max(u.r.end-u.r.first, 1))
	}
	units := slices.Clone(r.unit)
	score := make(map[int]float64, len(units))
	for i, u := range units {
		score[i] = reread(u)
	}
	idx := make([]int, len(units))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		return cmp.Or(cmp.Compare(units[b].reads, units[a].reads), cmp.Compare(score[b], score[a]))
	})
	kernelRow := r.row(budget, PolicyKernel, event.PhaseDecode, base, "")
	// The racing readers' mode, where the run has it: a pinning must win
	// in it too.
	raceKernel := kernelRow
	race := len(r.modes()) > 1
	if race {
		got, _ := r.simulate(capacity, raceWindow(ra), nil, false)
		raceKernel = r.row(budget, PolicyKernel, event.PhaseDecode, got, "")
	}
	best, bestRow := []int(nil), kernelRow
	bestGain := 0.0
	// A pin leaves the cache room for two read-arounds (the racing
	// readers' one each): in less, a fault's own read-around evicts the
	// page it was for, a thrash the model does not see. qwen3moe's plan
	// at 128 MiB pinned 9/10 of its 73.6 MiB, leaving 8 (5 once the
	// pinned run's non-file memory was measured), and the pinned run read
	// 68× the unpinned bytes where 0.84× was predicted.
	room := capacity - 2*int64(ra)
	for tenth := int64(1); tenth <= 9; tenth++ {
		limit := min(capacity*tenth/10, room) * pageSize
		if limit <= 0 {
			break
		}
		var chosen []int
		var spans [][2]int64
		for _, i := range idx {
			u := units[i]
			if units[i].reads == 0 {
				break
			}
			next := append(slices.Clone(spans), [2]int64{u.off, u.length})
			if pin.PageBytes(next) > limit {
				continue
			}
			chosen, spans = append(chosen, i), next
		}
		if len(chosen) == 0 || slices.Equal(chosen, best) {
			continue
		}
		pins, pp := pinnedPages(spans)
		got, _ := r.simulate(capacity-pp, ra, pins, false)
		row := r.row(budget, PolicyPlan, event.PhaseDecode, got, "")
		if !better(row, bestRow) {
			continue
		}
		gain := 1 - row.BytesReadPerToken/max(kernelRow.BytesReadPerToken, 1)
		if race {
			got, _ := r.simulate(capacity-pp, raceWindow(ra), pins, false)
			rr := r.row(budget, PolicyPlan, event.PhaseDecode, got, "")
			if !better(rr, raceKernel) {
				continue
			}
			gain = min(gain, 1-rr.BytesReadPerToken/max(raceKernel.BytesReadPerToken, 1))
		}
		best, bestRow, bestGain = chosen, row, gain
	}
	p := &pin.Plan{Model: id, Budget: budget, Ranges: []pin.Range{},
		Expected: map[string]map[string]*float64{PolicyKernel: figures(kernelRow)}, ExpectedNA: map[string]string{},
		ReadaheadBytes: int64(ra) * pageSize}
	for k, v := range kernelRow.NA {
		p.ExpectedNA[PolicyKernel+"/"+k] = v
	}
	gain := bestGain
	if best == nil || gain < minGain {
		p.Recommendation = PinNothing
		p.Reason = fmt.Sprintf("no pinning is predicted to read %.0f%% fewer bytes per decode token than the kernel's own policy (%.1f MiB) at this budget (read-around %.1f MiB)", minGain*100, kernelRow.BytesReadPerToken/(1<<20), float64(p.ReadaheadBytes)/(1<<20))
		if race {
			p.Reason += fmt.Sprintf(" in both modes of the run's racing readers (the kernel's %.1f MiB in the other)", raceKernel.BytesReadPerToken/(1<<20))
		}
		if decode.calls == 0 {
			p.Reason = "the run has no decode call to predict from"
		}
		return p, nil
	}
	slices.SortFunc(best, func(a, b int) int { return cmp.Compare(units[a].off, units[b].off) })
	var spans [][2]int64
	for _, i := range best {
		u := units[i]
		p.Ranges = append(p.Ranges, pin.Range{Offset: u.off, Length: u.length, Tensor: tensors[u.tensor].Name, Expert: u.expert})
		spans = append(spans, [2]int64{u.off, u.length})
	}
	p.Pinned = pin.PageBytes(spans)
	p.Recommendation = Pin
	p.Expected[PolicyPlan] = figures(bestRow)
	for k, v := range bestRow.NA {
		p.ExpectedNA[PolicyPlan+"/"+k] = v
	}
	p.Reason = fmt.Sprintf("pinning %d ranges (%.1f MiB) is predicted to read %.1f MiB per decode token against the kernel's %.1f MiB (%.0f%% fewer; read-around %.1f MiB)",
		len(p.Ranges), float64(p.Pinned)/(1<<20), bestRow.BytesReadPerToken/(1<<20), kernelRow.BytesReadPerToken/(1<<20), gain*100, float64(p.ReadaheadBytes)/(1<<20))
	if race {
		p.Reason += "; the share fewer is the smaller of the run's two modes (its readers race)"
	}
	return p, nil
}

// better says whether a predicts more tokens/s than b, or where either's
// is NA fewer bytes.
func better(a, b Row) bool {
	_, na := a.NA[ColTPS]
	_, nb := b.NA[ColTPS]
	if !na && !nb {
		return a.TokensPerS > b.TokensPerS
	}
	return a.BytesReadPerToken < b.BytesReadPerToken
}

// figures are a row's figures by column name, nil where NA.
func figures(r Row) map[string]*float64 {
	out := map[string]*float64{}
	for i, v := range []float64{r.BytesReadPerToken, r.MajorFaultsPerToken, r.StallNSPerToken, r.TokensPerS} {
		c := Figures[i]
		if _, na := r.NA[c]; !na {
			out[c] = &v
		}
	}
	return out
}
