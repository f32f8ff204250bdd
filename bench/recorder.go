package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

const gib = 1 << 30

// minRead is the least a run must read from the disk for figures per GiB
// read to mean anything: a run in RAM reads next to nothing.
const minRead = 64 << 20

// mb100 is issue 8's 100 MB bound on the recorder's RSS, in MiB.
const mb100 = 100e6 / (1 << 20)

// Recorder adds the recorder's own costs over an arm's traced runs, then
// ingests the last of them in a child of its own (`iocorr ingest`, whose
// wait4 maxrss is the ingest's alone) and checks its fidelity.
func Recorder(r *Report, cfg Config, sec string, runs []sample) {
	var cpu, before, while, wakes, rss, records, spoolPerGiB, recPerGiB, lost, faultRecs, faultCounts []float64
	var opHits, opHere, opBareLo, opBareHi []float64
	var perGiBNA string
	for _, t := range runs {
		m, err := rundir.ReadMeta(t.dir)
		if err != nil {
			r.NA(sec, "recorder", "", orNA(err))
			return
		}
		child := time.Duration(m.Child.UserNS + m.Child.SystemNS).Seconds()
		cpu = append(cpu, t.cpu-child)
		// Its own peak, from meta.json (getrusage of itself): polling its
		// VmHWM from here woke the bench 50 times a second beside the
		// traced runs only. An iocorr too old to write it has none.
		if m.Recorder != nil {
			rss = append(rss, float64(m.Recorder.MaxRSSKiB)/1024)
			if m.Recorder.BeforeNS > 0 {
				before = append(before, time.Duration(m.Recorder.BeforeNS).Seconds())
				while = append(while, time.Duration(m.Recorder.WhileNS).Seconds())
			}
			if w := m.Recorder.WakesWhile; w != nil && m.End.After(m.Start) {
				wakes = append(wakes, float64(*w)/m.End.Sub(m.Start).Seconds())
			}
		}
		var n, l uint64
		for _, c := range m.Counts {
			n += c
		}
		for _, c := range m.Lost {
			l += c
		}
		records = append(records, float64(n))
		lost = append(lost, float64(l))
		faultRecs = append(faultRecs, float64(m.Counts["fault"]))
		faultCounts = append(faultCounts, float64(m.Counts["fault_count"]))
		if op := m.OpProbes; op != nil && op.Tokens > 0 {
			opHits = append(opHits, op.HitsPerTokenMean)
			if op.CalibrationNA == "" {
				opHere = append(opHere, op.OverheadRatio)
			}
			opBareLo = append(opBareLo, op.BareMetalOverheadRatio[0])
			opBareHi = append(opBareHi, op.BareMetalOverheadRatio[1])
		}
		st, err := os.Stat(filepath.Join(t.dir, rundir.SpoolFile))
		if err != nil {
			r.NA(sec, "recorder", "", orNA(err))
			return
		}
		read, ok := diskRead(m)
		switch {
		case !ok:
			perGiBNA = "no diskstats of the model's disk in meta.json"
		case read < minRead:
			perGiBNA = fmt.Sprintf("the run read %d MiB from the disk (in RAM)", read>>20)
		default:
			spoolPerGiB = append(spoolPerGiB, float64(st.Size())/(1<<20)/(float64(read)/gib))
			recPerGiB = append(recPerGiB, float64(n)/(float64(read)/gib))
		}
	}
	r.Add(sec, "recorder CPU (traced run - child's rusage)", "s", cpu, "")
	// Its own CPU apart (meta.json): the start-up (probes, controls),
	// paid once a run, and what competed with the command while it ran.
	beforeNA := ""
	if len(before) != len(runs) {
		before, while, beforeNA = nil, nil, "this iocorr writes no recorder CPU before and while the command ran in meta.json"
	}
	r.Add(sec, "recorder CPU before the command ran (its own)", "s", before, beforeNA)
	r.Add(sec, "recorder CPU while the command ran (its own)", "s", while, beforeNA)
	// How often it woke beside the command: on this VM a waker elsewhere
	// sped node-llama-cpp up 2.7-5.9x (docs/overhead.md, session 14).
	wakesNA := ""
	if len(wakes) != len(runs) {
		wakes, wakesNA = nil, "this iocorr writes no recorder wakes in meta.json"
	}
	r.Add(sec, "recorder wakes a second while the command ran (its own voluntary context switches; the warden apart)", "1/s", wakes, wakesNA)
	if len(rss) == len(runs) {
		r.Add(sec, "recorder peak RSS while recording (its own maxrss)", "MiB", rss, "")
	} else {
		r.NA(sec, "recorder peak RSS while recording (its own maxrss)", "MiB", "this iocorr writes no recorder rusage in meta.json")
	}
	r.goal("<=", mb100, "max")
	r.Add(sec, "records per run", "count", records, "")
	// Faults in the model files are records; those outside them are
	// counts in the kernel (a record per thread, token and class at the
	// end), unless --probe faults records them one by one.
	r.Add(sec, "fault records per run", "count", faultRecs, "")
	r.Add(sec, "fault count records per run (faults outside the model files, counted in the kernel)", "count", faultCounts, "")
	r.Add(sec, "records per GiB read", "count/GiB", recPerGiB, perGiBNA)
	r.Add(sec, "spool per GiB read", "MiB/GiB", spoolPerGiB, perGiBNA)
	r.goal("<=", 2e6/(1<<20), "median")
	r.Add(sec, "lost events (meta.json)", "count", lost, "")
	r.goal("<=", 0, "max")
	if len(opHits) > 0 {
		// What the op probes' traps cost, from the run's own hit counts
		// and the calibrated cost of a hit (meta.json op_probes).
		r.Add(sec, "op-probe hits per token (every thread)", "count", opHits, "")
		r.Add(sec, "op-probe traps / token time, here (hits x calibrated cost)", "ratio", opHere, "the cost of a hit could not be calibrated")
		r.Add(sec, "op-probe traps / token time, bare metal at 0.3 us per hit", "ratio", opBareLo, "")
		r.Add(sec, "op-probe traps / token time, bare metal at 0.7 us per hit", "ratio", opBareHi, "")
	}
	if len(runs) == 0 {
		return
	}
	last := runs[len(runs)-1].dir
	ing, err := ingestRun(cfg, last)
	if err != nil {
		r.NA(sec, "ingest peak RSS", "MiB", orNA(err))
		return
	}
	r.Add(sec, "ingest peak RSS (iocorr ingest, wait4 maxrss)", "MiB", []float64{float64(ing.maxRSS) / 1024}, "")
	r.goal("<=", 2*mb100, "max")
	r.Add(sec, "ingest CPU", "s", []float64{ing.cpu}, "")
	Fidelity(r, sec, last)
}

// ingestRun builds the store of a recorded run in a child of its own.
func ingestRun(cfg Config, dir string) (sample, error) {
	s := sample{dir: dir}
	cmd := exec.Command(cfg.Iocorr, "ingest", dir)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return s, fmt.Errorf("iocorr ingest: %w: %s", err, sweep.LastLine(errb.Bytes()))
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	s.cpu, s.maxRSS = cpuSeconds(ru), ru.Maxrss
	return s, nil
}
