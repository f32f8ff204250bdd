package sweeprun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/iocorr/iocorr/internal/cgroup"
	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/sweep"
)

// untraced runs the command once more under budget b without the tracer,
// as recorder.Run launches it (held until it joins the memory cgroup of
// the same limit, after the same eviction of its models), right after the
// traced run of the same budget: the pair is interleaved budget by budget.
// It returns the decode speed the command reported.
func untraced(ctx context.Context, opts Sweep, b Budget, models []string) (float64, error) {
	ro := opts.Record
	if ro.DropCaches {
		if err := pagecache.DropCaches(); err != nil {
			return 0, err
		}
	}
	if ro.Cold {
		for _, m := range models {
			if _, _, err := pagecache.Evict(m); err != nil {
				return 0, err
			}
		}
	}
	var cg *cgroup.Cgroup
	if b.Bytes > 0 {
		var err error
		if cg, err = cgroup.NewMemory(cgroup.Name(os.Getpid())+"-untraced", b.Bytes); err != nil {
			return 0, err
		}
		defer cg.Remove()
	}
	var place func(int) error
	if cg != nil {
		place = cg.Add
	}
	out := launch.Share(&bytes.Buffer{})
	ex, err := launch.RunHeld(ctx, ro.Argv, ro.User, out, out, place)
	if err != nil {
		return 0, err
	}
	switch {
	case ex.Signal != "":
		return 0, fmt.Errorf("killed by %s", ex.Signal)
	case ex.Code != 0:
		return 0, fmt.Errorf("exit status %d", ex.Code)
	}
	tps, ok := sweep.ReportedTokensPerS(out.Bytes())
	if !ok {
		return 0, errors.New(sweep.NoReport(out.Bytes()))
	}
	return tps, nil
}

// teeTo is w (or def when w is nil) and also buf.
func teeTo(w, def, buf io.Writer) io.Writer {
	if w == nil {
		w = def
	}
	return io.MultiWriter(w, buf)
}
