package sweep

import (
	"fmt"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
)

// Summarize computes r's figures from the store of the run in dir.
func Summarize(dir string, r *Row) error {
	run, err := store.OpenRun(dir)
	if err != nil {
		return err
	}
	defer run.Close()
	return SummarizeRun(run, r)
}

// SummarizeRun computes r's figures from an open run's store.
func SummarizeRun(run *store.Run, r *Row) error {
	if r.NA == nil {
		r.NA = map[string]string{}
	}
	if err := r.figures(run.Store); err != nil {
		return err
	}
	// A run of the default tier takes its residency from these.
	snaps, err := run.Snapshots()
	if err != nil {
		return err
	}
	return r.expertHitRate(run, snaps)
}

// expertHitRate takes the run's real expert hit rate from iocorr stats
// (decode picks whose expert slice was wholly resident), so that the sweep
// and stats can never disagree on it.
func (r *Row) expertHitRate(run *store.Run, snaps []rundir.Snapshot) error {
	if !hasExperts(run.Store) {
		r.NA["expert_hit_rate"] = "the model has no experts"
		return nil
	}
	rep, err := stats.Compute(run, stats.Options{K: []int{1}, NoTokenResidency: true, Snapshots: snaps})
	if err != nil {
		return fmt.Errorf("computing the expert hit rate: %w", err)
	}
	if t := rep.Table("cache_sim"); t != nil {
		pol, hit := t.Col("policy"), t.Col("hit_rate_ratio")
		for _, row := range t.Rows {
			if pol >= 0 && hit >= 0 && row[pol].S == "real" {
				if v := row[hit]; v.NA != "" {
					r.NA["expert_hit_rate"] = v.NA
				} else {
					h := v.F
					r.ExpertHitRate = &h
					delete(r.NA, "expert_hit_rate")
				}
			}
		}
	}
	if len(r.NA) == 0 {
		r.NA = nil
	}
	return nil
}

// figures computes the row's figures from the store's token rows.
func (r *Row) figures(st *store.Store) error {
	var first, last, inDecode uint64
	var tokens uint64
	err := st.EachToken(func(t *event.TokenInfo) error {
		if t.Phase != event.PhaseDecode {
			return nil
		}
		n := uint64(max(t.NTokens, 0))
		r.Decode += n
		r.ReadBytes += t.ReadBytes
		r.Major += t.Major
		r.StallNS += t.StallNS
		if t.StartNS == 0 || t.EndNS < t.StartNS {
			return nil
		}
		// Only tokens whose call was timed count toward tokens/s.
		tokens += n
		inDecode += t.EndNS - t.StartNS
		if first == 0 || t.StartNS < first {
			first = t.StartNS
		}
		last = max(last, t.EndNS)
		return nil
	})
	if err != nil {
		return err
	}
	ratio := func(name string, num, den float64, na string) *float64 {
		if den == 0 {
			r.NA[name] = na
			return nil
		}
		v := num / den
		return &v
	}
	if r.Decode == 0 {
		r.NA["tokens_per_s"] = "no decode token was recorded"
		r.NA["bytes_read_per_token"] = "no decode token was recorded"
		r.NA["major_faults_per_token"] = "no decode token was recorded"
		r.NA["stall_share"] = "no decode token was recorded"
	} else {
		if last > first {
			r.DecodeNS = last - first
		}
		r.TokensPerS = ratio("tokens_per_s", float64(tokens)*1e9, float64(r.DecodeNS), "no decode call was timed")
		r.BytesPerToken = ratio("bytes_read_per_token", float64(r.ReadBytes), float64(r.Decode), "")
		r.MajorPerToken = ratio("major_faults_per_token", float64(r.Major), float64(r.Decode), "")
		r.StallShare = ratio("stall_share", float64(r.StallNS), float64(inDecode), "no decode call was timed")
	}
	r.NA["expert_hit_rate"] = "iocorr stats has no real-run row in its cache_sim table"
	return nil
}

func hasExperts(st *store.Store) bool {
	for i := range st.Tensors {
		if st.Tensors[i].Experts > 0 {
			return true
		}
	}
	return false
}
