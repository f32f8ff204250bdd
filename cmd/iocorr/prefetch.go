//go:build linux && !noloader

package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/proc"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/prefetch"
	"github.com/iocorr/iocorr/recorder"
)

func init() {
	register(&command{
		name:    "prefetch",
		summary: "run a command with the router-driven expert prefetcher (no recording)",
		usage:   "[--window SIZE] [--layers] [--release] [--mem-limit SIZE] [--pin PLAN] [flags] -- CMD [ARGS...]",
		flags:   prefetchFlags,
		man:     prefetchManual,
	})
}

// prefetchOpts are prefetch's flags.
type prefetchOpts struct {
	rec     recorder.Options
	window  units.Size
	layers  bool
	release bool
	report  string
	user    string
}

func prefetchFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := &prefetchOpts{}
	fs.Var(&o.window, "window", "most bytes brought in for one layer's picks at once (default: a quarter of the budget --mem-limit and a pin leave; unbounded without a limit)")
	fs.BoolVar(&o.release, "release", false, releaseHelp)
	fs.BoolVar(&o.layers, "layers", false, "also ask, at each layer's first pick, for the next layer's dense weights (after its experts, in the same window; the output head after the last layer's)")
	memLimitFlag(fs, &o.rec.MemLimit, "run the command under this memory budget (e.g. 256MiB), which the prefetcher's reads count against")
	fs.StringVar(&o.rec.Pin, "pin", "", "a pin plan (iocorr plan -o): its ranges are locked in the command's memory cgroup before it starts (needs --mem-limit)")
	fs.BoolVar(&o.rec.Cold, "cold", false, "evict the model files from the page cache before the command starts")
	fs.StringArrayVar(&o.rec.Models, "model", nil, "a model file (repeatable; default: every GGUF file the command maps)")
	fs.StringArrayVar(&o.rec.Libs, "lib", nil, "also attach the router probe to this ELF file (repeatable)")
	fs.StringVar(&o.user, "user", "", "run the command as this user (default: the invoking user under sudo)")
	fs.StringVar(&o.report, "report", "", "also write the prefetcher's report to this file as JSON")
	return func(ctx context.Context, args []string) error { return runPrefetch(ctx, o, args) }
}

func (o *prefetchOpts) options(argv []string) (recorder.Options, error) {
	ro := o.rec
	ro.Argv, ro.Version, ro.Stdout, ro.Stderr = argv, version, stdout, stderr
	ro.Prefetch = &prefetch.Config{Window: int64(o.window), Layers: o.layers, Release: o.release}
	var err error
	if o.user != "" {
		ro.User, err = proc.LookupUser(o.user)
	} else {
		ro.User, err = proc.SudoUser()
	}
	return ro, err
}

func runPrefetch(ctx context.Context, o *prefetchOpts, argv []string) error {
	stdout, stderr = shareable(stdout), shareable(stderr)
	ro, err := o.options(argv)
	if err != nil {
		return commandErr("prefetch", err)
	}
	rep, res, err := recorder.Prefetch(ctx, ro)
	if rep != nil {
		fmt.Fprint(stderr, prefetch.Summary(rep))
		if o.report != "" {
			b, jerr := json.MarshalIndent(rep, "", "  ")
			if jerr == nil {
				jerr = atomicfile.WriteBytes(o.report, 0o644, false, append(b, '\n'))
			}
			if jerr != nil && err == nil {
				err = fmt.Errorf("--report: %w", jerr)
			}
		}
	}
	if err != nil {
		return commandErr("prefetch", err)
	}
	if code := res.Meta.Child.ExitCode; code != 0 {
		return exitError{code}
	}
	return nil
}

const releaseHelp = "once a layer used the pages brought in for it, let reclaim take them first (process_madvise MADV_COLD at the next layer's picks): under a budget that keeps little of the model between tokens, what the next slices need is then not evicted before use (plan says where it pays)"
