package recorder

import (
	"context"
	"fmt"
	"os"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/prefetch"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// prefetcher is the recording's prefetcher (Options.Prefetch): the drain
// goroutine feeds it picks and faults; nil methods do nothing.
type prefetcher struct {
	pf *prefetch.Prefetcher
	// known is how many model files it was offered so far: a model
	// mapped after the start is offered at the next pick.
	known int
}

// startPrefetch starts the prefetcher's helper in the command's memory
// cgroup (cg, nil without a limit), after the eviction of --cold and the
// pin, so that neither undoes what it brings in.
func (r *recording) startPrefetch(cg *cgroup.Cgroup) error {
	if r.o.Prefetch == nil {
		return nil
	}
	cfg := *r.o.Prefetch
	if cfg.Window == 0 {
		// A pin's pages are the budget's already: the window is of what
		// it leaves. Pinned pages are resident, so never asked for.
		budget := r.o.MemLimit
		if p := r.m.Controls.Pinned; p != nil && budget > 0 {
			budget = max(budget-p.Bytes, 1)
		}
		cfg.Window = prefetch.DefaultWindow(budget)
	}
	var place func(int) error
	if cg != nil {
		place = cg.Add
	}
	files := r.models.files()
	pf, err := prefetch.Start(cfg, files, place, faultOffsetsTraced(r.sess.tr.Capabilities()))
	if err != nil {
		return fmt.Errorf("--prefetch: %w", err)
	}
	r.pf = &prefetcher{pf: pf, known: len(files)}
	return nil
}

// faultOffsetsTraced says whether the tracer records each fault with its
// file offset as it happens, which the prefetcher's outcomes need: the
// offsets' fallback resolves them only at ingest.
func faultOffsetsTraced(cs []bpf.CapStatus) bool {
	faults, offsets := false, false
	for _, c := range cs {
		switch c.Name {
		case bpf.CapFaults:
			faults = !c.NA()
		case bpf.CapOffsets:
			offsets = c.Primary && !c.NA()
		}
	}
	return faults && offsets
}

func (p *prefetcher) onPicks(e *wire.ExpertsEvent, ms *models) {
	if p == nil {
		return
	}
	if files := ms.files(); len(files) > p.known {
		for _, f := range files[p.known:] {
			p.pf.AddModel(f)
		}
		p.known = len(files)
	}
	p.pf.OnPicks(e)
}

func (p *prefetcher) onFault(e *wire.FaultEvent) {
	if p == nil {
		return
	}
	if e.VmaBusy != 0 && e.Class == uint8(wire.FaultClassFAULT_MAJOR) {
		// The kernel could not look the address up: the maps can, and
		// a major fault is what the prefetcher's report counts.
		r := *e
		r.Dev, r.Ino, r.FileOff = fileAt(e.Hdr.Tgid, e.Addr)
		e = &r
	}
	p.pf.OnFault(e)
}

// stopPrefetch ends the prefetcher once the command has ended and the
// ring was read (or the run failed before it started), and puts its
// report in the metadata.
func (r *recording) stopPrefetch() {
	if r.pf == nil {
		return
	}
	rep := r.pf.pf.Close()
	r.pf = nil
	r.update(func(m *rundir.Meta) { m.Controls.Prefetched = &rep })
}

// Prefetch runs o.Argv with the prefetcher and only the hooks it acts on
// (`iocorr prefetch`): a recording kept in a scratch directory, removed at
// the end, whose meta.json's prefetch report it returns.
func Prefetch(ctx context.Context, o Options) (*rundir.Prefetched, Result, error) {
	if o.Prefetch == nil {
		o.Prefetch = &prefetch.Config{}
	}
	o.PrefetchOnly = true
	dir, err := os.MkdirTemp("", "iocorr-prefetch-")
	if err != nil {
		return nil, Result{}, err
	}
	defer os.RemoveAll(dir)
	o.Dir, o.Force = dir, true
	res, err := Run(ctx, o)
	return res.Meta.Controls.Prefetched, res, err
}
