package recorder

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/internal/tracefs"
	"github.com/iocorr/iocorr/rundir"
)

// session is the tracer of one recording: opened with the run's options,
// closed once (early, as soon as nothing reads the ring, so that what the
// command left running is no longer slowed by probes; or by Run's defer
// on the way out), and read at the end for what the kernel side counted.
type session struct {
	tr     *bpf.Tracer
	once   sync.Once
	stderr io.Writer
}

// openSession loads and attaches the BPF programs; the error says what
// the machine lacks where it can tell.
func openSession(o *Options) (*session, error) {
	// Tracepoints are named through tracefs, which many machines boot
	// without; as root it is mounted here, as perf and bpftrace do.
	if dir, mounted, err := tracefs.Ensure(); err != nil {
		return nil, err
	} else if mounted {
		fmt.Fprintf(o.Stderr, "iocorr record: tracefs was not mounted: mounted it at %s\n", dir)
	}
	tr, err := openTracer(bpf.Options{Probes: o.Probes, StopAtTokens: o.ExactSnapshots, Prefetch: o.Prefetch != nil, PrefetchOnly: o.PrefetchOnly, RingBufBytes: o.RingBufBytes, SelfPID: os.Getpid()})
	if err != nil {
		if errors.Is(err, bpf.ErrPrivileges) {
			err = fmt.Errorf("%w (run as root)", err)
		}
		return nil, err
	}
	return &session{tr: tr, stderr: o.Stderr}, nil
}

// refusals says, one line a refused program, which capabilities the
// kernel's verifier took away at load, with its reason: doctor (which
// loads nothing) cannot foresee it, and without a word the run would only
// show those figures NA. The recording warns them (startSession), so
// that meta.json keeps them too.
func refusals(cs []bpf.CapStatus) []string {
	var whys []string
	names := map[string][]string{}
	for _, c := range cs {
		if !c.Refused() {
			continue
		}
		if _, ok := names[c.Why]; !ok {
			whys = append(whys, c.Why)
		}
		names[c.Why] = append(names[c.Why], c.Name)
	}
	out := make([]string, len(whys))
	for i, why := range whys {
		out[i] = fmt.Sprintf("%s; NA in this run: %s", why, strings.Join(names[why], ", "))
	}
	return out
}

// close detaches everything; only the first call does it.
func (s *session) close() {
	s.once.Do(func() {
		if err := s.tr.Close(); err != nil {
			fmt.Fprintf(s.stderr, "iocorr: closing the tracer: %v\n", err)
		}
	})
}

// endCounts is what the tracer counted in the kernel over a run, each
// with the error of its read.
type endCounts struct {
	lost                 map[string]uint64
	lostErr              error
	cut                  bpf.LoopsCut
	cutErr               error
	stopsUnheld          uint64
	stopsUnheldErr       error
	stopsUnsent          uint64
	stopsUnsentErr       error
	unorderedRuns        uint64
	unorderedRunsErr     error
	requeues             *uint64
	requeuesErr          error
	completionsUnseen    uint64
	completionsUnseenErr error
}

// counts reads the tracer's end-of-run counts.
func (s *session) counts() endCounts {
	var c endCounts
	c.lost, c.lostErr = s.tr.Lost()
	c.cut, c.cutErr = s.tr.LoopsCut()
	c.stopsUnheld, c.stopsUnheldErr = s.tr.StopsUnheld()
	c.stopsUnsent, c.stopsUnsentErr = s.tr.StopsUnsent()
	c.unorderedRuns, c.unorderedRunsErr = s.tr.UnorderedPageRuns()
	c.requeues, c.requeuesErr = s.tr.BlockRequeues()
	c.completionsUnseen, c.completionsUnseenErr = s.tr.BlockCompletionsUnseen()
	return c
}

// record puts the counts in m and returns the events lost and the
// warnings the counts call for, in the order meta.json lists them.
// blockUnfinished is the block requests taken from BPF's pending map at
// the end; unheld hands the family the pauses not taken, and says whether
// it keeps pauses at all.
func (c endCounts) record(m *rundir.Meta, blockUnfinished uint64, unheld func(uint64) bool) (nlost uint64, warnings []string) {
	warn := func(s string) { warnings = append(warnings, s) }
	if c.lostErr != nil {
		warn(c.lostErr.Error())
	}
	if c.lost != nil {
		m.Lost = c.lost
	}
	for _, n := range c.lost {
		nlost += n
	}
	if nlost > 0 {
		warn(fmt.Sprintf("%d events were lost (the ring buffer was full); raise --ringbuf-size", nlost))
	}
	// The bounded loops of a kernel without bpf_loop say what they left
	// unread: counted, never dropped silently.
	if c.cutErr != nil {
		warn(c.cutErr.Error())
	} else if c.cut.GraphNodes > 0 || c.cut.ExpertRows > 0 {
		m.LoopsCut = &rundir.LoopsCut{GraphNodes: c.cut.GraphNodes, ExpertRows: c.cut.ExpertRows}
		warn(fmt.Sprintf("the kernel has no bpf_loop and its bounded loops left %d graph nodes unwalked and %d token rows of expert ids unread", c.cut.GraphNodes, c.cut.ExpertRows))
	}
	if c.stopsUnheldErr != nil {
		warn(c.stopsUnheldErr.Error())
	} else if n := c.stopsUnheld; n > 0 && unheld(n) {
		warn(fmt.Sprintf("%d pauses for a uprobe attach were not taken: the thread that asked began less than 100 ms before, and the warden seizes threads only once they have run that long; the file it mapped was probed while it ran on (up to the recorder's wakeup later)", n))
	}
	if c.stopsUnsentErr != nil {
		warn(c.stopsUnsentErr.Error())
	} else if n := c.stopsUnsent; n > 0 {
		m.PausesUnsent = n
		warn(fmt.Sprintf("%d pauses for a uprobe attach could not be sent (the kernel refused the SIGSTOP: its per-CPU work still carried another signal, or the thread was exiting): the files they were for were probed while the process ran on, and their calls before that are not in the record", n))
	}
	if c.unorderedRunsErr != nil {
		warn(c.unorderedRunsErr.Error())
	} else if n := c.unorderedRuns; n > 0 {
		m.PageRunsUnordered = n
		warn(fmt.Sprintf("%d page-cache runs reached the ring after a page event of the same pages (their CPU kept changing their slot past the flush's tries): nothing was lost, and the store orders each chunk of events by time", n))
	}
	// Requests whose completion never reached BPF (seen on this VM for a
	// few completions run in softirq), or had not come by the end, are
	// recorded from their issue, without a latency: say how many.
	if c.requeuesErr != nil {
		warn(c.requeuesErr.Error())
	} else {
		m.BlockRequeues = c.requeues
	}
	if c.completionsUnseenErr != nil {
		warn(c.completionsUnseenErr.Error())
	} else if n := c.completionsUnseen + blockUnfinished; n > 0 {
		m.BlockIncomplete = n
		warn(fmt.Sprintf("%d block requests were recorded without their completion (never seen by BPF, or not yet come at the end): their bytes are in the record, their latency is NA", n))
	}
	return nlost, warnings
}
