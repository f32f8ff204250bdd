package stats

import (
	"cmp"
	"slices"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

// A run of the default tier has no page-cache events to replay. Its
// residency comes from the recorder's snapshots instead (rundir.Snapshot:
// mincore soon after each token's start, at most 1% of the run's time),
// and its refaults from the device reads: a page of a model read from the
// device again was evicted and added again in between, which is what the
// replay counts as a refault.

// snapshotResidency sets, from the snapshots, each token's residency (the
// tokens with a snapshot of their own) and the real hit rate of the
// router's picks against it; tokens without one are NA with why.
func (r *run) snapshotResidency(exps map[int][]uint32, selsOf map[uint32][]event.ExpertSel) {
	rs := r.res
	byToken := map[uint32]*rundir.Snapshot{}
	for i := range r.opt.Snapshots {
		s := &r.opt.Snapshots[i]
		if _, ok := byToken[s.Token]; !ok {
			byToken[s.Token] = s
		}
	}
	r.tokenResNA = r.meta.ResidencySnapshots.NoSnapshotNA()
	r.snapshotNA = r.meta.ResidencySnapshots.NoDecodeSnapshotNA()
	// The snapshots' pages are the state: known for every model they map,
	// from none resident on (the replay's start is unused).
	for m := range rs.known {
		rs.known[m] = ""
		for p := range rs.state[m] {
			rs.set(m, int64(p), false)
		}
	}
	order := make([]int, 0, len(r.tokens))
	for i, t := range r.tokens {
		if byToken[t.Token] != nil {
			order = append(order, i)
		}
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(r.tokens[a].StartNS, r.tokens[b].StartNS) })
	for _, ti := range order {
		s := byToken[r.tokens[ti].Token]
		for m := range rs.state {
			var pm *rundir.PageMap
			if m < len(s.Models) {
				pm = s.Models[m]
			}
			if pm == nil {
				continue
			}
			// Only the pages that changed since the last snapshot move the
			// tensors' counts.
			next := 0
			for p := range rs.state[m] {
				for next < len(pm.Ranges) && pm.Ranges[next][1] <= int64(p) {
					next++
				}
				in := next < len(pm.Ranges) && pm.Ranges[next][0] <= int64(p)
				rs.set(m, int64(p), in)
			}
		}
		r.snapToken(ti, exps, selsOf)
	}
}

// readRefaults charges each page read from the device more than once to
// the tensor holding its first byte, once per read after the first (or
// per read, when every page was resident before the run: its first read
// followed an eviction too).
func (r *run) readRefaults(readSeen [][]uint32) {
	rs := r.res
	clear(rs.refaults)
	for m, counts := range readSeen {
		if why := r.meta.Models[m].ResidencyNA(); why != "" {
			rs.refaultNA = why
			return
		}
		before := uint32(0)
		if r.meta.Models[m].ResidentBefore != 0 {
			before = 1
		}
		for p, n := range counts {
			if n+before < 2 {
				continue
			}
			if id, ok := rs.owner(m, int64(p)); ok {
				rs.refaults[id] += int64(n + before - 1)
			}
		}
	}
	r.refaultsFromReads = true
}
