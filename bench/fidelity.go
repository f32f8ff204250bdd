package bench

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/wire"
)

// Fidelity adds, for an ingested run, what was captured over what the
// kernel says independently: major faults against the child's rusage,
// model bytes read against /proc/diskstats, and the model's pages the
// trace leaves resident against the mincore(2) snapshot record took at
// the end.
func Fidelity(r *Report, sec, dir string) {
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		r.NA(sec, "fidelity", "", orNA(err))
		return
	}
	major, err := majorFaults(dir)
	switch {
	case err != nil:
		r.NA(sec, "major faults captured/rusage", "ratio", orNA(err))
	case m.Child.MajFlt == 0:
		r.NA(sec, "major faults captured/rusage", "ratio", "the child had no major fault")
	default:
		r.Add(sec, "major faults captured/rusage", "ratio", []float64{float64(major) / float64(m.Child.MajFlt)}, "")
	}
	run, err := store.OpenRun(dir)
	if err != nil {
		r.NA(sec, "model block bytes/diskstats", "ratio", orNA(err))
		return
	}
	defer run.Close()
	st := run.Store
	var sum event.Counters
	if err := st.Aggs(func(a *event.Agg) error { sum.Add(&a.Counters); return nil }); err != nil {
		r.NA(sec, "model block bytes/diskstats", "ratio", orNA(err))
		return
	}
	read, ok := diskRead(m)
	switch {
	case !ok:
		r.NA(sec, "model block bytes/diskstats", "ratio", "no diskstats of the model's disk in meta.json")
	case read < minRead:
		r.NA(sec, "model block bytes/diskstats", "ratio", fmt.Sprintf("the run read %d MiB from the disk (in RAM)", read>>20))
	default:
		r.Add(sec, "model block bytes/diskstats", "ratio", []float64{float64(sum.ReadBytes) / float64(read)}, "")
	}
	resident(r, sec, run)
}

// resident compares the model pages `iocorr stats` replays from the
// page-cache events as resident at the end with the mincore(2) snapshot
// record took then, summed over the tensors of its per-tensor table.
func resident(r *Report, sec string, run *store.Run) {
	const name = "model pages resident at end: trace/mincore"
	rep, err := stats.Compute(run, stats.Options{NoTokenResidency: true})
	if err != nil {
		r.NA(sec, name, "ratio", orNA(err))
		return
	}
	t := rep.Table("tensors")
	if t == nil {
		r.NA(sec, name, "ratio", "iocorr stats has no tensors table")
		return
	}
	col := map[string]int{}
	for i, c := range t.Columns {
		col[c.Name] = i
	}
	ci, okT := col["resident_end_pages"]
	cm, okM := col["resident_end_mincore_pages"]
	if !okT || !okM {
		r.NA(sec, name, "ratio", "the tensors table of iocorr stats has no resident_end_pages or resident_end_mincore_pages")
		return
	}
	var traced, mincore int64
	for _, row := range t.Rows {
		for _, v := range []struct {
			cell stats.Value
			sum  *int64
		}{{row[ci], &traced}, {row[cm], &mincore}} {
			if v.cell.NA != "" {
				r.NA(sec, name, "ratio", v.cell.NA)
				return
			}
			*v.sum += v.cell.I
		}
	}
	if mincore == 0 {
		r.NA(sec, name, "ratio", fmt.Sprintf("mincore says no tensor page is resident, the trace %d", traced))
		return
	}
	r.Add(sec, name, "ratio", []float64{float64(traced) / float64(mincore)}, "")
}

// majorFaults counts the run's major faults of every traced process, the
// records' and the kernel's counts' of faults outside the model files:
// wait4's rusage of the command covers the same set.
func majorFaults(dir string) (uint64, error) {
	sp, err := ingest.OpenSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		return 0, err
	}
	defer sp.Close()
	var n uint64
	var ds ingest.DecodeStats
	for {
		rec, err := sp.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		switch uint32(ingest.RecordType(rec)) {
		case uint32(wire.EventTypeEV_FAULT), uint32(wire.EventTypeEV_FAULT_COUNT):
		default:
			continue
		}
		d, ok := ingest.Decode(rec, &ds)
		switch {
		case !ok:
		case d.Fault() != nil && d.Fault().Class == uint8(wire.FaultClassFAULT_MAJOR):
			n++
		case d.FaultCount() != nil && d.FaultCount().Class == uint8(wire.FaultClassFAULT_MAJOR):
			n += d.FaultCount().Count
		}
	}
}
