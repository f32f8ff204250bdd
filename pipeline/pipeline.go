// Package pipeline is the one ingest of a run directory: the spool's
// records are decoded (ingest.Decode), attributed to tensors (correlate,
// with the run's maps snapshots loaded), and written to the run's store
// (store.Writer) with the run's timeline marks. `iocorr record` runs it when recording ends, `iocorr
// ingest` runs it on demand, and the tests run it: there is no other path
// from a spool to a store, and no reader reads the spool.
package pipeline

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/wire"
)

// Options tune Ingest.
type Options struct {
	// Force rebuilds a store that is already complete for this spool.
	Force bool
	// ChunkEvents is the number of events per stored chunk
	// (store.DefaultChunkEvents when 0).
	ChunkEvents int
}

// Summary describes the store an ingest built (or found complete).
type Summary = store.Summary

// Ingest builds DIR/db from DIR's spool and metadata.
//
// It is idempotent: a complete store for the same spool (size and mtime)
// and store format is left alone (Summary.AlreadyBuilt) unless opts.Force.
// It is crash-safe (see store.Writer): DIR/db is absent, the previous
// store or the new one, never half written, and two ingests of one run at
// once are refused.
func Ingest(ctx context.Context, dir string, opts Options) (Summary, error) {
	spoolPath := filepath.Join(dir, rundir.SpoolFile)
	fi, err := os.Stat(spoolPath)
	if err != nil {
		if err := store.CheckRunDir(dir); err != nil {
			return Summary{}, err
		}
		return Summary{}, fmt.Errorf("run has no event spool: %w", err)
	}
	w, err := store.Begin(dir)
	if err != nil {
		return Summary{}, err
	}
	defer w.Close()
	if !opts.Force {
		if s, ok := w.Current(fi.Size(), fi.ModTime().UnixNano()); ok {
			return s, nil
		}
	}
	start := time.Now()
	cor, err := correlate.NewRun(dir, nil)
	if err != nil {
		return Summary{}, err
	}
	if err := w.Create(cor.Tensors(), opts.ChunkEvents); err != nil {
		return Summary{}, err
	}
	cor.SetSink(w)
	if err := cor.AddSpool(ctx, spoolPath); err != nil {
		return Summary{}, err
	}
	res, err := cor.Finish()
	if err != nil {
		return Summary{}, err
	}
	sum := summarize(cor.Meta(), res)
	sum.SpoolSize, sum.SpoolModNS = fi.Size(), fi.ModTime().UnixNano()
	sum.BuildNS = time.Since(start).Nanoseconds()
	if err := w.Commit(&res.Result, &sum); err != nil {
		return Summary{}, err
	}
	sum.BuildNS = time.Since(start).Nanoseconds()
	return sum, nil
}

// summarize is what the store says of its ingest, from the correlator's
// counts and the recording's metadata.
func summarize(meta *rundir.Meta, res *correlate.Result) Summary {
	st := &res.Stats
	sum := Summary{
		Records:          st.Spool.Records,
		ByType:           map[string]uint64{},
		Short:            st.Decode.Short,
		Unknown:          st.Decode.Unknown,
		BadFrames:        st.Spool.BadFrames,
		TornTail:         st.Spool.TornTail,
		Lost:             meta.Lost,
		Events:           st.Events,
		Tokens:           len(res.Tokens),
		Tensors:          len(res.Tensors),
		AggRows:          len(res.Aggs),
		OpProbes:         res.OpProbes,
		NotFileBacked:    res.NotBacked,
		PicksUnseen:      res.PicksUnseen,
		PicksUnseenCalls: res.PicksUnseenCalls,
		PendingCapped:    st.PendingCapped,
		HeldAggsPeak:     st.HeldAggsPeak,
		HeldTokensPeak:   st.HeldTokensPeak,
		FaultsByMaps:     st.FaultsByMaps,
		FaultsCounted:    st.FaultsCounted,
		MapsMissing:      st.MapsMissing,
		Incomplete:       !meta.Complete,
	}
	for t, n := range st.Decode.ByType {
		if n > 0 {
			sum.ByType[wire.EventTypeName(uint32(t))] = n
		}
	}
	return sum
}
