package recorder

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// spool is the run's event file with its records counted by type (what
// meta.json's counts say). The drain goroutine writes it while the command
// runs; end appends what BPF still held and closes it. It is closed once:
// by end, which needs the error (a full disk), or by Run's defer on the way
// out of a run that failed before.
type spool struct {
	w      *ingest.SpoolWriter
	counts ingest.Counts
	once   sync.Once
	err    error // the close's
}

// createSpool creates the spool file of the run directory dir.
func createSpool(dir string) (*spool, error) {
	w, err := ingest.CreateSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		return nil, err
	}
	return &spool{w: w}, nil
}

// drain reads the ring into the spool until ctx ends or a write fails,
// handing every record to act (bpf.Drain).
func (s *spool) drain(ctx context.Context, ring *bpf.Ring, act func(typ uint16, rec []byte)) error {
	return bpf.Drain(ctx, ring, s.w, &s.counts, act)
}

// append writes a record the ring did not carry (one end-of-run take),
// counted as the drained ones are. Only one goroutine writes at a time:
// the drain has ended when end appends.
func (s *spool) append(typ wire.EventType, rec []byte) error {
	if err := s.w.Write(rec); err != nil {
		return err
	}
	atomic.AddUint64(&s.counts[typ], 1)
	return nil
}

// close flushes and closes the file the first time; every call returns
// that close's error.
func (s *spool) close() error {
	s.once.Do(func() { s.err = s.w.Close() })
	return s.err
}
