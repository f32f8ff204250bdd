// Package rectest makes the runs the end-to-end tests of the library
// read, through the library, as `iocorr record` and `iocorr ingest` make
// them: recorder.Record with the command line's defaults. A test binary that records must call
// launch.RunShimIfChild first thing in its TestMain: the recorder
// re-executes that binary as the held child.
package rectest

import (
	"cmp"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/prefetch"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/testkit/llmtest"
)

// Main is the TestMain of a test binary that records: the recorder
// re-executes that binary as the held child, which must become the
// command before any test runs.
func Main(m *testing.M) {
	launch.RunShimIfChild()
	pin.RunHolderIfChild() // record --pin's holder re-executes the binary too
	prefetch.RunHelperIfChild()
	os.Exit(m.Run())
}

// Options are `iocorr record`'s flags a test sets; the zero value is
// `iocorr record -o DIR -- argv`.
type Options struct {
	Cold     bool
	MemLimit string                    // as --mem-limit spells it, e.g. llmtest.MemLimit
	Probe    string                    // as --probe spells it: "", "ops", "pagecache", "sched", or several, comma-separated
	Set      func(o *recorder.Options) // anything else, set last
}

// Output is what a recording printed, the command's stdout and its stderr
// with the recorder's warnings, and what the ingest said of the run (that
// `iocorr record` prints after them).
type Output struct {
	Stdout, Stderr string
	Ingest         pipeline.Summary
	// Live are the figures the recorder counted as the records came,
	// which `iocorr record`'s summary prints.
	Live recorder.Stats
}

// Record records argv into dir and ingests it, as `iocorr record -o dir
// [opts] -- argv` does, failing the test on any error.
func Record(t testing.TB, dir string, opts Options, argv ...string) Output {
	t.Helper()
	out, err := RecordErr(t.Context(), dir, opts, argv...)
	if err != nil {
		t.Fatalf("record %s: %v\n%s", strings.Join(argv, " "), err, out.Stderr)
	}
	return out
}

// RecordErr is Record returning the first error instead of failing. ctx
// ending ends the recording, as Ctrl-C ends `iocorr record`, and not the
// ingest after it (recorder.Record).
func RecordErr(ctx context.Context, dir string, opts Options, argv ...string) (Output, error) {
	// Files, as a terminal would be: the command writes them itself, and
	// the recorder's warnings go to the same stderr at the same time.
	var out [2]*os.File
	for i := range out {
		f, err := os.CreateTemp("", "rectest-out-*")
		if err != nil {
			return Output{}, err
		}
		os.Remove(f.Name())
		defer f.Close()
		out[i] = f
	}
	o := recorder.Options{Dir: dir, Argv: argv, Cold: opts.Cold, Stdout: out[0], Stderr: out[1]}
	var err error
	if o.Probes, err = recorder.ParseProbes(cmp.Or(opts.Probe, "graph")); err != nil {
		return Output{}, err
	}
	if opts.MemLimit != "" {
		if o.MemLimit, err = units.ParseSize(opts.MemLimit); err != nil {
			return Output{}, err
		}
	}
	if opts.Set != nil {
		opts.Set(&o)
	}
	rec, err := recorder.Record(ctx, o)
	var said [2][]byte
	for i, f := range out {
		if _, serr := f.Seek(0, io.SeekStart); serr != nil {
			return Output{}, errors.Join(err, serr)
		}
		b, rerr := io.ReadAll(f)
		if rerr != nil {
			return Output{}, errors.Join(err, rerr)
		}
		said[i] = b
	}
	return Output{string(said[0]), string(said[1]), rec.Store, rec.Stats}, err
}

// RecordAttachedErr records the running process pid into dir and ingests
// it, as `iocorr record -o dir -p pid --duration d` does: the recording
// ends after d, when the process exits, or when ctx ends (as Ctrl-C ends
// it). It returns the first error instead of failing.
func RecordAttachedErr(ctx context.Context, dir string, pid int, d time.Duration) (Output, error) {
	return RecordErr(ctx, dir, Options{Set: func(o *recorder.Options) { o.PID, o.Duration = pid, d }})
}

// RecordMoE records llama.cpp's llama-completion (of the Shared build)
// generating tokens tokens on llmtest.MoE from a cold cache under
// llmtest.MemLimit with the given probe sets, into a directory of its
// own, and returns it.
func RecordMoE(t testing.TB, probe string, tokens int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	Record(t, dir, Options{Cold: true, MemLimit: llmtest.MemLimit, Probe: probe},
		llmtest.CompletionArgs(llmtest.CLI(t, llmtest.Shared, "llama-completion"), llmtest.Model(t, llmtest.MoE), tokens)...)
	return dir
}
