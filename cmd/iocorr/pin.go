//go:build linux && !noloader

package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/pin"
)

func init() {
	register(&command{
		name:    "pin",
		summary: "run a command with a plan's file ranges locked in RAM inside its own memory cgroup (no tracing)",
		usage:   "--plan plan.json [--mem-limit B] -- CMD [ARGS...]",
		flags:   pinFlags,
		man:     pinManual,
	})
}

func pinFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	planFile := fs.String("plan", "", "the plan (iocorr plan -o)")
	var limit int64
	memLimitFlag(fs, &limit, "the command's memory budget (default: the plan's)")
	return func(ctx context.Context, argv []string) error {
		if *planFile == "" {
			return usagef("pin: --plan wants a plan file (iocorr plan -o plan.json)")
		}
		if len(argv) == 0 {
			return usagef("pin: no command to run (pin --plan plan.json -- CMD)")
		}
		o := pin.Options{Argv: argv, MemLimit: limit, Stdout: stdout, Stderr: stderr}
		var err error
		if o.Plan, err = pin.Read(*planFile); err != nil {
			return fmt.Errorf("pin: %w", err)
		}
		res, err := pin.Run(ctx, o)
		if err != nil {
			return fmt.Errorf("pin: %w", err)
		}
		fmt.Fprintf(stderr, "iocorr: pin: %s locked (%d ranges of %s; the holder's own memory %s) in cgroup v%d %s; its counters then: %v\n",
			units.Bytes(float64(res.Pinned)), len(o.Plan.Ranges), o.Plan.Model.Path, units.Bytes(float64(res.HolderAnon)), res.Version, res.Cgroup, res.Counters)
		if res.Exit.Code != 0 {
			return exitError{res.Exit.Code}
		}
		return nil
	}
}
