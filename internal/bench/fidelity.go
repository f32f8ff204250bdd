package bench

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
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
	st, err := index.Open(dir)
	if err != nil {
		r.NA(sec, "model block bytes/diskstats", "ratio", orNA(err))
		return
	}
	defer st.Close()
	var sum correlate.Counters
	if err := st.Aggs(func(a *correlate.Agg) error { sum.Add(&a.Counters); return nil }); err != nil {
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
	mf := m.Models[0]
	if mf.ResidentEnd == nil {
		r.NA(sec, "model pages resident at end: trace/mincore", "ratio", "no end-of-run mincore snapshot in meta.json")
		return
	}
	traced := mf.ResidentBefore + int64(sum.PagesAdded) - int64(sum.PagesEvicted)
	if mf.ResidentEnd.Resident == 0 {
		r.NA(sec, "model pages resident at end: trace/mincore", "ratio", fmt.Sprintf("mincore says none resident, the trace %d", traced))
		return
	}
	r.Add(sec, "model pages resident at end: trace/mincore", "ratio", []float64{float64(traced) / float64(mf.ResidentEnd.Resident)}, "")
}

// majorFaults counts the run's major-fault records of every traced
// process: wait4's rusage of the command covers the same set.
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
		if uint32(ingest.RecordType(rec)) != uint32(bpf.IocorrEventTypeEV_FAULT) {
			continue
		}
		if d, ok := ingest.Decode(rec, &ds); ok && d.Fault() != nil && d.Fault().Class == uint8(bpf.IocorrFaultClassFAULT_MAJOR) {
			n++
		}
	}
}
