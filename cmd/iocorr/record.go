package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "record",
		summary: "run a command and trace which tensors cause its disk I/O",
		usage:   "[-o DIR] [flags] -- CMD [ARGS...] | -p PID [--duration 30s]",
		flags:   recordFlags,
	})
}

type recordOpts struct {
	out        string
	force      bool
	probe      string
	libs       []string
	models     []string
	cold       bool
	dropCaches bool
	memLimit   string
	user       string
	noIngest   bool
	ringbuf    string
	pid        int
	duration   time.Duration
	exactSnaps bool
}

func recordFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := &recordOpts{}
	fs.StringVarP(&o.out, "output", "o", rundir.Default, "run directory to write")
	fs.BoolVarP(&o.force, "force", "f", false, "overwrite an existing run directory")
	runFlags(fs, o, "before the command starts")
	fs.StringVar(&o.memLimit, "mem-limit", "", "run the command in a memory cgroup with this limit (e.g. 256MiB)")
	fs.BoolVar(&o.noIngest, "no-ingest", false, "do not build the query store at the end (run iocorr ingest DIR later)")
	fs.IntVarP(&o.pid, "pid", "p", 0, "attach to this running process (and the children it starts) instead of running a command")
	fs.DurationVar(&o.duration, "duration", 0, "with -p: record this long (default: until Ctrl-C or the process exits)")
	return func(ctx context.Context, args []string) error { return runRecord(ctx, o, args) }
}

// runFlags are the flags that shape one recorded run, shared by record
// and sweep (which records one run per budget); when says when the
// cache controls act.
func runFlags(fs *pflag.FlagSet, o *recordOpts, when string) {
	fs.StringVar(&o.probe, "probe", "graph", "probe sets, comma-separated: graph (the default tier: faults, block requests, read calls, tokens, the router), ops (also every op, costlier), pagecache (also every page-cache add and eviction of the models: landed readahead, residency replay, refaults; costlier under memory pressure), sched (context switches and wakeups of traced threads)")
	fs.StringArrayVar(&o.libs, "lib", nil, "also attach uprobes to this ELF file (repeatable)")
	fs.StringArrayVar(&o.models, "model", nil, "a model file to trace (repeatable; default: every GGUF file the command maps)")
	fs.BoolVar(&o.cold, "cold", false, "evict the model files from the page cache "+when)
	fs.BoolVar(&o.dropCaches, "drop-caches", false, "drop the whole system's page cache "+when)
	fs.StringVar(&o.user, "user", "", "run the command as this user (default: the invoking user under sudo)")
	fs.BoolVar(&o.exactSnaps, "exact-snapshots", false, "stop the traced process at every token's start until its residency snapshot is taken, so it is the page cache at the start (default: a snapshot taken while it runs on, some milliseconds later, at most 2% of the run's time; the pause costs ~20 ms a token)")
	fs.StringVar(&o.ringbuf, "ringbuf-size", fmt.Sprintf("%dMiB", bpf.DefaultRingBufBytes>>20), "BPF ring buffer size (a power of two)")
}

// recorderOptions turns the flags into the recorder's options; a value
// that cannot be parsed is a usage error.
func (o *recordOpts) recorderOptions(argv []string) (recorder.Options, error) {
	ro := recorder.Options{
		Dir: o.out, Force: o.force, Argv: argv, Libs: o.libs, Models: o.models,
		Cold: o.cold, DropCaches: o.dropCaches, Version: version, Stdout: stdout, Stderr: stderr,
	}
	ro.PID, ro.Duration, ro.ExactSnapshots = o.pid, o.duration, o.exactSnaps
	if len(argv) == 0 && o.pid == 0 {
		return ro, usagef("record: no command given (iocorr record [flags] -- CMD ARGS... or -p PID)")
	}
	if o.duration < 0 || (o.duration > 0 && o.pid == 0) {
		return ro, usagef("record: --duration needs -p and a positive length")
	}
	for _, set := range strings.Split(o.probe, ",") {
		switch set {
		case "graph":
		case "ops":
			ro.ProbeOps = true
		case "sched":
			ro.ProbeSched = true
		case "pagecache":
			ro.PageCache = true
		default:
			return ro, usagef("record: --probe must be graph or ops, and pagecache or sched, comma-separated; not %q", o.probe)
		}
	}
	ring, err := units.ParseSize(o.ringbuf)
	if err != nil {
		return ro, usagef("record: --ringbuf-size: %v", err)
	}
	ro.RingBufBytes = int(min(ring, 1<<31))
	if o.memLimit != "" {
		if ro.MemLimit, err = units.ParseSize(o.memLimit); err != nil {
			return ro, usagef("record: --mem-limit: %v", err)
		}
	}
	if o.user != "" {
		if os.Geteuid() != 0 {
			return ro, usagef("record: --user needs root")
		}
		ro.User, err = proc.LookupUser(o.user)
	} else {
		ro.User, err = proc.SudoUser()
	}
	if err != nil {
		return ro, fmt.Errorf("record: %w", err)
	}
	if f, ok := stderr.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ro.Progress = statusLine(stderr)
	}
	return ro, nil
}

func runRecord(ctx context.Context, o *recordOpts, argv []string) error {
	stdout, stderr = shareable(stdout), shareable(stderr)
	ro, err := o.recorderOptions(argv)
	if err != nil {
		return err
	}
	if err := ro.Validate(); err != nil {
		var bad *recorder.OptionError
		if errors.As(err, &bad) {
			return usagef("record: %s", bad.Msg)
		}
		return fmt.Errorf("record: %w", err)
	}
	res, err := recorder.Run(ctx, ro)
	if res.Ran {
		printRecordSummary(stderr, &res, o.out)
	}
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	if !o.noIngest {
		// Signals that reached the command were for the command: only
		// those that arrive from now on stop the build.
		base := ctx
		if res.Signals.Received > 0 {
			base = context.WithoutCancel(ctx)
		}
		bctx, bstop := signal.NotifyContext(base, os.Interrupt, syscall.SIGTERM)
		err := buildStore(bctx, o.out)
		bstop()
		if err != nil {
			return fmt.Errorf("record: %w", err)
		}
		if err := recorder.ChownRun(o.out, ro.User); err != nil {
			return fmt.Errorf("record: %w", err)
		}
	}
	if code := res.Meta.Child.ExitCode; code != 0 {
		return exitError{code}
	}
	return nil
}

// lockedWriter serializes writes: iocorr's own messages come from the
// drain goroutine while exec.Cmd copies the command's output into the
// same writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// shareable makes w safe for iocorr and the command to write at once. A
// file is left as it is: the command gets the descriptor itself (its
// stderr stays a terminal), and the kernel orders the writes.
func shareable(w io.Writer) io.Writer {
	if _, ok := w.(*os.File); ok {
		return w
	}
	return &lockedWriter{w: w}
}
