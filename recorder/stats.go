package recorder

import (
	"sync/atomic"
	"time"

	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/wire"
)

// Stats are the figures of the end-of-run summary, counted as records
// arrive.
type Stats struct {
	Prefill, Decode        uint64 // llama_decode calls by phase
	PrefillTokens          uint64
	Graphs, Ops            uint64
	Major, Minor           uint64 // faults of the traced processes
	MajorModel, MinorModel uint64 // of those, in model files
	StallNS                uint64 // fault time, start to end
	PagesAdded, Evicted    uint64 // page-cache pages of model files
	BlockRead, BlockReqs   uint64 // block read bytes and requests, but those beneath a model's loop device
	Tasks                  uint64
	Events                 uint64 // records written to the spool
}

// Tokens is the number of llama_decode calls.
func (s Stats) Tokens() uint64 { return s.Prefill + s.Decode }

// Progress is what Options.Progress is told while the command runs.
type Progress struct {
	Elapsed time.Duration
	Stats   Stats
	// Done is set on the last call, when the command has ended.
	Done bool
}

// liveStats are Stats counted by the drain goroutine and read by others.
type liveStats struct {
	prefill, decode      atomic.Uint64
	prefillTokens        atomic.Uint64
	graphs, ops          atomic.Uint64
	major, minor         atomic.Uint64
	majorModel, minModel atomic.Uint64
	stallNS              atomic.Uint64
	pagesAdded, evicted  atomic.Uint64
	blockRead, blockReqs atomic.Uint64
	tasks                atomic.Uint64
}

func (s *liveStats) snapshot(events uint64) Stats {
	return Stats{
		Prefill: s.prefill.Load(), Decode: s.decode.Load(), PrefillTokens: s.prefillTokens.Load(),
		Graphs: s.graphs.Load(), Ops: s.ops.Load(), Major: s.major.Load(), Minor: s.minor.Load(),
		MajorModel: s.majorModel.Load(), MinorModel: s.minModel.Load(), StallNS: s.stallNS.Load(),
		PagesAdded: s.pagesAdded.Load(), Evicted: s.evicted.Load(),
		BlockRead: s.blockRead.Load(), BlockReqs: s.blockReqs.Load(), Tasks: s.tasks.Load(), Events: events,
	}
}

// faults adds n faults of class with their summed stall; inModel: in a
// model file.
func (s *liveStats) faults(class uint8, n, stall uint64, inModel bool) {
	switch class {
	case uint8(wire.FaultClassFAULT_MAJOR):
		s.major.Add(n)
		if inModel {
			s.majorModel.Add(n)
		}
	case uint8(wire.FaultClassFAULT_MINOR):
		s.minor.Add(n)
		if inModel {
			s.minModel.Add(n)
		}
	default:
		return
	}
	s.stallNS.Add(stall)
}

func (s *liveStats) observe(d ingest.Record, m *models) {
	switch {
	case d.Decode() != nil:
		if d.Type != uint16(wire.EventTypeEV_DECODE_BEGIN) {
			return
		}
		e := d.Decode()
		if e.Hdr.Phase == uint8(wire.PhasePHASE_PREFILL) {
			s.prefill.Add(1)
			s.prefillTokens.Add(uint64(e.N_tokens))
		} else {
			s.decode.Add(1)
		}
	case d.Graph() != nil:
		s.graphs.Add(1)
	case d.Op() != nil:
		s.ops.Add(1)
	case d.Fault() != nil:
		e := d.Fault()
		inModel := e.Ino != 0 && m.known(e.Dev, e.Ino)
		// As correlate charges them: a fault never completed (its record
		// ended by the thread's next fault) is no fault the kernel
		// counted, and has no stall.
		var stall uint64
		if e.StartTs != 0 && e.Hdr.Ts > e.StartTs {
			stall = e.Hdr.Ts - e.StartTs
		}
		s.faults(e.Class, 1, stall, inModel)
	case d.FaultCount() != nil:
		e := d.FaultCount()
		s.faults(e.Class, e.Count, e.StallNs, false)
	case d.Page() != nil:
		e := d.Page()
		if !m.known(e.Dev, e.Ino) {
			return
		}
		switch d.Type {
		case uint16(wire.EventTypeEV_PAGE_ADD):
			s.pagesAdded.Add(1 << e.Order)
		case uint16(wire.EventTypeEV_PAGE_DEL):
			s.evicted.Add(1 << e.Order)
		}
	case d.PageRun() != nil:
		e := d.PageRun()
		if !m.known(e.Dev, e.Ino) {
			return
		}
		switch e.Kind {
		case uint16(wire.EventTypeEV_PAGE_ADD):
			s.pagesAdded.Add(uint64(e.NrPages))
		case uint16(wire.EventTypeEV_PAGE_DEL):
			s.evicted.Add(uint64(e.NrPages))
		}
	case d.Block() != nil:
		e := d.Block()
		if kernel.BlockOpOf(e.CmdFlags) == kernel.BlockRead && !m.readBeneath(e.Dev, e.Sector*512) {
			s.blockRead.Add(uint64(e.Bytes))
			s.blockReqs.Add(1)
		}
	case d.Task() != nil:
		s.tasks.Add(1)
	}
}

// report calls progress every ProgressInterval until stop, then once with
// Done set.
func (s *liveStats) report(progress func(Progress), counts *ingest.Counts, t0 time.Time) (stop func()) {
	if progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(ProgressInterval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				progress(Progress{Elapsed: time.Since(t0), Stats: s.snapshot(counts.Total()), Done: true})
				return
			case <-tick.C:
				progress(Progress{Elapsed: time.Since(t0), Stats: s.snapshot(counts.Total())})
			}
		}
	}()
	return func() { close(done); <-finished }
}
