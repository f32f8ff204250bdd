package recorder

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/iocorr/iocorr/pipeline"
)

// Recorded is what became of a whole recording: the run, and its store.
type Recorded struct {
	Result
	// Store is what the ingest said of the run; Ingested says it built
	// the store (not with Options.NoIngest, nor for a command that never
	// ran).
	Store    pipeline.Summary
	Ingested bool
}

// IngestError is an ingest that failed after the recording: the run
// directory is whole, and `iocorr ingest DIR` tries again.
type IngestError struct {
	Dir string
	Err error
}

func (e *IngestError) Error() string {
	return fmt.Sprintf("building the query store (run `iocorr ingest %s` to retry): %v", e.Dir, e.Err)
}

func (e *IngestError) Unwrap() error { return e.Err }

// Record is `iocorr record` as one call: Run, then the one ingest
// (pipeline.Ingest) of a run whose command ran, a failed recording's too
// (the store then holds what was captured), unless o.NoIngest; then the
// run directory, store and all, goes to o.User. The error is the
// recording's, else the ingest's (an *IngestError), else the hand-over's.
//
// ctx ending ends the recording, as Ctrl-C ends the command: the signals
// that did were for the command, so the ingest after it is stopped only
// by SIGINT or SIGTERM arriving once it has begun.
func Record(ctx context.Context, o Options) (Recorded, error) {
	res, err := Run(ctx, o)
	out := Recorded{Result: res}
	if !res.Ran {
		return out, err
	}
	if o.Recorded != nil {
		o.Recorded(&out.Result)
	}
	if o.NoIngest {
		return out, err
	}
	ictx, stop := signal.NotifyContext(context.WithoutCancel(ctx), os.Interrupt, syscall.SIGTERM)
	sum, ierr := pipeline.Ingest(ictx, o.Dir, pipeline.Options{})
	stop()
	if ierr != nil {
		ierr = &IngestError{Dir: o.Dir, Err: ierr}
	}
	out.Store, out.Ingested = sum, ierr == nil
	// Run handed over what it wrote; the store is new.
	cerr := ChownRun(o.Dir, o.User)
	return out, cmp.Or(err, ierr, cerr)
}
