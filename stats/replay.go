package stats

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
)

// PageStates replays a pagecache-tier run's page-cache adds and evictions
// and returns, at each of the times at (CLOCK_MONOTONIC, ascending), which
// pages of each model were resident, [time][model][page], and which pages
// had an event since the time before (since the start for the first). An
// event at exactly a time counts as before it.
//
// An event's time is its coalesced run's last page's: the kernel flushes
// every pending run at each token start, so the replay is exact at token
// starts, and a page's event stamped between two token starts happened
// between them. It is the oracle the recorder's residency snapshots are
// checked against; a run without page-cache events has no history to
// replay, and says why.
func PageStates(recorded *store.Run, at []uint64) (states, changed [][][]bool, err error) {
	st, meta := recorded.Store, recorded.Meta
	if why := meta.PageCacheNA(); why != "" {
		return nil, nil, fmt.Errorf("no page-cache history to replay: %s", why)
	}
	if !slices.IsSorted(at) {
		return nil, nil, fmt.Errorf("replay times are not in order")
	}
	r := &run{st: st, meta: meta}
	var pev []pageEv
	err = st.Records(store.EventFilter{}, func(rec []event.Event) error {
		if k := rec[0].Kind; k != event.KindPageAdd && k != event.KindPageDel {
			return nil
		}
		for i := range rec {
			e := &rec[i]
			if m, off, ok := r.fileRange(e); ok {
				pev = append(pev, pageEv{ts: e.Ts, model: int32(m), first: off / ps, end: (off + int64(e.Bytes) + ps - 1) / ps, add: e.Kind == event.KindPageAdd})
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("reading page-cache events: %w", err)
	}
	slices.SortStableFunc(pev, func(a, b pageEv) int { return cmp.Compare(a.ts, b.ts) })
	rs := newResidency(meta, st.Tensors)
	for m, why := range rs.known {
		if why != "" {
			return nil, nil, fmt.Errorf("model %d: %s", m, why)
		}
	}
	next := 0
	for _, t := range at {
		touched := make([][]bool, len(rs.state))
		for m := range rs.state {
			touched[m] = make([]bool, len(rs.state[m]))
		}
		for ; next < len(pev) && pev[next].ts <= t; next++ {
			ev := &pev[next]
			for p := max(ev.first, 0); p < ev.end && p < int64(len(touched[ev.model])); p++ {
				touched[ev.model][p] = true
			}
			rs.apply(ev)
		}
		snap := make([][]bool, len(rs.state))
		for m := range rs.state {
			snap[m] = slices.Clone(rs.state[m])
		}
		states, changed = append(states, snap), append(changed, touched)
	}
	return states, changed, nil
}
