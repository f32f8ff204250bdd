package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/term"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
)

// liveStats are the figures of the end-of-run summary and of the live
// status line, counted as records arrive.
type liveStats struct {
	prefill, decode      atomic.Uint64 // llama_decode calls by phase
	prefillTokens        atomic.Uint64
	graphs, ops          atomic.Uint64
	major, minor         atomic.Uint64
	majorModel, minModel atomic.Uint64
	stallNS              atomic.Uint64
	pagesAdded, evicted  atomic.Uint64 // pages of model files
	blockRead, blockReqs atomic.Uint64
	tasks                atomic.Uint64
}

func (s *liveStats) observe(typ uint16, rec []byte, r *recording) {
	switch uint32(typ) {
	case uint32(bpf.IocorrEventTypeEV_DECODE_BEGIN):
		e := (*bpf.IocorrDecodeEvent)(unsafe.Pointer(&rec[0]))
		if e.Hdr.Phase == uint8(bpf.IocorrPhasePHASE_PREFILL) {
			s.prefill.Add(1)
			s.prefillTokens.Add(uint64(e.N_tokens))
		} else {
			s.decode.Add(1)
		}
	case uint32(bpf.IocorrEventTypeEV_GRAPH):
		s.graphs.Add(1)
	case uint32(bpf.IocorrEventTypeEV_OP):
		s.ops.Add(1)
	case uint32(bpf.IocorrEventTypeEV_FAULT):
		e := (*bpf.IocorrFaultEvent)(unsafe.Pointer(&rec[0]))
		inModel := e.Ino != 0 && r.models.known(e.Dev, e.Ino)
		if e.Class == uint8(bpf.IocorrFaultClassFAULT_MAJOR) {
			s.major.Add(1)
			if inModel {
				s.majorModel.Add(1)
			}
		} else {
			s.minor.Add(1)
			if inModel {
				s.minModel.Add(1)
			}
		}
		if e.StartTs != 0 && e.Hdr.Ts > e.StartTs {
			s.stallNS.Add(e.Hdr.Ts - e.StartTs)
		}
	case uint32(bpf.IocorrEventTypeEV_PAGE_ADD), uint32(bpf.IocorrEventTypeEV_PAGE_DEL):
		e := (*bpf.IocorrPageEvent)(unsafe.Pointer(&rec[0]))
		if !r.models.known(e.Dev, e.Ino) {
			return
		}
		if uint32(typ) == uint32(bpf.IocorrEventTypeEV_PAGE_ADD) {
			s.pagesAdded.Add(1 << e.Order)
		} else {
			s.evicted.Add(1 << e.Order)
		}
	case uint32(bpf.IocorrEventTypeEV_BLOCK):
		e := (*bpf.IocorrBlockEvent)(unsafe.Pointer(&rec[0]))
		if e.CmdFlags&0xff == 0 { // REQ_OP_READ
			s.blockRead.Add(uint64(e.Bytes))
			s.blockReqs.Add(1)
		}
	case uint32(bpf.IocorrEventTypeEV_TASK):
		s.tasks.Add(1)
	}
}

// start shows a one-line status every half second while the command
// runs, only when w is a terminal (progress never goes to a pipe).
func (s *liveStats) start(w io.Writer, counts *ingest.Counts, t0 time.Time) (stop func()) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\033[K")
				return
			case <-tick.C:
				fmt.Fprintf(w, "\r\033[Kiocorr: %s  tokens %d  faults %d major  pages +%d -%d  read %s  events %d",
					time.Since(t0).Truncate(100*time.Millisecond), s.prefill.Load()+s.decode.Load(),
					s.major.Load(), s.pagesAdded.Load(), s.evicted.Load(), humanBytes(s.blockRead.Load()), counts.Total())
			}
		}
	}()
	return func() { close(done); <-finished }
}

func (r *recording) printSummary(w io.Writer, counts *ingest.Counts) {
	s := &r.stats
	m := &r.meta
	var lost uint64
	for _, n := range m.Lost {
		lost += n
	}
	fmt.Fprintf(w, "iocorr: recorded %s in %s (%s", strings.Join(m.Command, " "), m.End.Sub(m.Start).Truncate(time.Millisecond), exitText(m.Child))
	fmt.Fprintf(w, ")\n")
	fmt.Fprintf(w, "  tokens      %d llama_decode calls: %d prefill (%d tokens), %d decode\n",
		s.prefill.Load()+s.decode.Load(), s.prefill.Load(), s.prefillTokens.Load(), s.decode.Load())
	fmt.Fprintf(w, "  graphs      %d computed, %d ops probed\n", s.graphs.Load(), s.ops.Load())
	fmt.Fprintf(w, "  faults      %d major, %d minor; in model files %d major, %d minor; stall %s (child majflt %d)\n",
		s.major.Load(), s.minor.Load(), s.majorModel.Load(), s.minModel.Load(), humanDuration(s.stallNS.Load()), m.Child.MajFlt)
	fmt.Fprintf(w, "  page cache  model pages added %d (%s), evicted %d\n", s.pagesAdded.Load(), humanBytes(s.pagesAdded.Load()*4096), s.evicted.Load())
	fmt.Fprintf(w, "  block       %d reads, %s read\n", s.blockReqs.Load(), humanBytes(s.blockRead.Load()))
	fmt.Fprintf(w, "  events      %d recorded, %d lost\n", counts.Total(), lost)
	if lost > 0 {
		fmt.Fprintf(w, "iocorr: WARNING: %d events were lost; per type: %v\n", lost, m.Lost)
	}
	fmt.Fprintf(w, "  run         %s\n", r.dir)
}

func exitText(c rundir.Child) string {
	if c.Signal != "" {
		return "killed by " + c.Signal
	}
	return fmt.Sprintf("exit status %d", c.ExitCode)
}
