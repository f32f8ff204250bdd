//go:build linux && !noloader

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/prefetch"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "record",
		summary: "run a command and trace which tensors cause its disk I/O",
		usage:   "[-o DIR] [flags] -- CMD [ARGS...] | -p PID [--duration 30s]",
		flags:   recordFlags,
		man:     recordManual,
	})
}

// recordOpts are record's flags: recorder.Options, bound to the flags
// where a flag is the option, and the values that need parsing.
type recordOpts struct {
	rec     recorder.Options
	user    string
	ringbuf units.Size
	// prefetch, prefetchWindow and prefetchLayers are record's
	// --prefetch flags.
	prefetch        bool
	prefetchWindow  units.Size
	prefetchLayers  bool
	prefetchRelease bool
}

func recordFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := &recordOpts{}
	fs.StringVarP(&o.rec.Dir, "output", "o", rundir.Default, "run directory to write")
	fs.BoolVarP(&o.rec.Force, "force", "f", false, "overwrite an existing run directory")
	runFlags(fs, o, "before the command starts")
	memLimitFlag(fs, &o.rec.MemLimit, "run the command under this memory budget (e.g. 256MiB)")
	fs.BoolVar(&o.rec.NoIngest, "no-ingest", false, "do not build the query store at the end (run iocorr ingest DIR later)")
	fs.IntVarP(&o.rec.PID, "pid", "p", 0, "attach to this running process (and the children it starts) instead of running a command")
	fs.DurationVar(&o.rec.Duration, "duration", 0, "with -p: record this long (default: until Ctrl-C or the process exits)")
	fs.BoolVar(&o.prefetch, "prefetch", false, "run the router-driven expert prefetcher beside the command (as iocorr prefetch does), its report in meta.json")
	fs.Var(&o.prefetchWindow, "prefetch-window", "with --prefetch: most bytes brought in for one layer's picks at once (default: a quarter of the budget --mem-limit and a pin leave)")
	fs.BoolVar(&o.prefetchRelease, "prefetch-release", false, "with --prefetch: "+releaseHelp)
	fs.BoolVar(&o.prefetchLayers, "prefetch-layers", false, "with --prefetch: also the next layer's dense weights at each layer's first pick (the output head at the last layer's)")
	return func(ctx context.Context, args []string) error { return runRecord(ctx, o, args) }
}

// runFlags are the flags that shape one recorded run, shared by record
// and sweep (which records one run per budget); when says when the
// cache controls act.
func runFlags(fs *pflag.FlagSet, o *recordOpts, when string) {
	fs.Var(&o.rec.Probes, "probe", "probe sets, comma-separated: graph (the default tier: faults, block requests, read calls, tokens, the router), ops (also every op, costlier), pagecache (also every page-cache add and eviction of the models: landed readahead, residency replay, refaults; costlier under memory pressure), sched (context switches and wakeups of traced threads), faults (also each fault outside the model files one by one: by default the kernel counts them per token and thread)")
	fs.StringArrayVar(&o.rec.Libs, "lib", nil, "also attach uprobes to this ELF file (repeatable)")
	fs.StringArrayVar(&o.rec.Models, "model", nil, "a model file to trace (repeatable; default: every GGUF file the command maps)")
	fs.BoolVar(&o.rec.Cold, "cold", false, "evict the model files from the page cache "+when)
	fs.BoolVar(&o.rec.DropCaches, "drop-caches", false, "drop the whole system's page cache "+when)
	fs.StringVar(&o.rec.Pin, "pin", "", "a pin plan (iocorr plan -o): its ranges are locked in the command's memory cgroup "+when+" and held to its end (needs --mem-limit)")
	fs.StringVar(&o.user, "user", "", "run the command as this user (default: the invoking user under sudo)")
	fs.BoolVar(&o.rec.ExactSnapshots, "exact-snapshots", false, "stop the traced process at every token's start until its residency snapshot is taken, so it is the page cache at the start (default: a snapshot taken while it runs on, some milliseconds later, at most 1% of the run's time; the pause costs ~20 ms a token)")
	o.ringbuf = recorder.DefaultRingBufBytes
	fs.Var(&o.ringbuf, "ringbuf-size", "BPF ring buffer size (a power of two)")
}

// options completes the recorder's options from the flags that need
// parsing; a value that cannot be parsed is a usage error (without the
// command's name: commandErr adds it).
func (o *recordOpts) options(argv []string) (recorder.Options, error) {
	ro := o.rec
	ro.Argv, ro.Version, ro.Stdout, ro.Stderr = argv, version, stdout, stderr
	var err error
	ro.RingBufBytes = int(min(o.ringbuf, 1<<31))
	if (o.prefetchWindow != 0 || o.prefetchLayers || o.prefetchRelease) && !o.prefetch {
		return ro, usagef("--prefetch-window, --prefetch-layers and --prefetch-release need --prefetch")
	}
	if o.prefetch {
		ro.Prefetch = &prefetch.Config{Window: int64(o.prefetchWindow), Layers: o.prefetchLayers, Release: o.prefetchRelease}
	}
	if o.user != "" {
		if os.Geteuid() != 0 {
			return ro, usagef("--user needs root")
		}
		ro.User, err = proc.LookupUser(o.user)
	} else {
		ro.User, err = proc.SudoUser()
	}
	if err != nil {
		return ro, err
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ro.Progress = statusLine(stderr)
	}
	return ro, nil
}

func runRecord(ctx context.Context, o *recordOpts, argv []string) error {
	stdout, stderr = shareable(stdout), shareable(stderr)
	ro, err := o.options(argv)
	if err != nil {
		return commandErr("record", err)
	}
	ro.Recorded = func(res *recorder.Result) {
		printRecordSummary(stderr, res, ro.Dir)
		if p := res.Meta.Controls.Prefetched; p != nil {
			fmt.Fprint(stderr, prefetch.Summary(p))
		}
	}
	rec, err := recorder.Record(ctx, ro)
	if rec.Ingested {
		printBuildSummary(rec.Store, ro.Dir)
	}
	if err != nil {
		return commandErr("record", err)
	}
	if code := rec.Meta.Child.ExitCode; code != 0 {
		return exitError{code}
	}
	return nil
}

// commandErr puts the command's name before err; a usage error, or an
// option the recorder refused, stays a usage error.
func commandErr(name string, err error) error {
	var ue usageError
	var bad *recorder.OptionError
	switch {
	case errors.As(err, &ue):
		return usagef("%s: %s", name, ue.msg)
	case errors.As(err, &bad):
		return usagef("%s: %s", name, bad.Msg)
	}
	return fmt.Errorf("%s: %w", name, err)
}

// shareable makes w safe for iocorr and the command to write at once. A
// file is left as it is: the command gets the descriptor itself (its
// stderr stays a terminal), and the kernel orders the writes.
func shareable(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return launch.Share(w)
}
