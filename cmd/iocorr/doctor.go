//go:build linux && !noloader

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/doctor"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "doctor",
		summary: "check that this machine can record, and what a command offers to probe",
		usage:   "[--lib PATH] [-- CMD [ARGS...]] | --disk FILE",
		flags:   doctorFlags,
		man:     doctorManual,
	})
}

func doctorFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	var o doctor.Targets
	fs.StringArrayVar(&o.Libs, "lib", nil, "also look for probe symbols in this file (repeatable)")
	disk := fs.String("disk", "", "measure the disk holding FILE (O_DIRECT random reads at depths 1-32, and the prefetch cost) and keep its profile for record (in $"+rundir.DiskProfilesEnv+", default "+rundir.DiskProfilesDir+")")
	format := formatFlag(fs)
	return func(ctx context.Context, args []string) error {
		if *disk != "" {
			if len(args) > 0 || len(o.Libs) > 0 {
				return usageError{"--disk measures a disk alone: no command or --lib with it"}
			}
			d, kept, err := doctor.MeasureDisk(*disk, doctor.DiskOptions{})
			if err != nil {
				return fmt.Errorf("doctor --disk: %w", err)
			}
			if p := d.Unsteady(); p != nil {
				fmt.Fprintf(stderr, "iocorr: warning: the disk's bandwidth at depth %d, %s reads moved by %.0f%% of its median between rounds: it was busy, throttled or bursting meanwhile; measure it again while it is idle\n",
					p.Depth, units.ExactSize(p.BlockBytes), 100*p.Spread())
			}
			if d.PrefetchCostNA != "" {
				fmt.Fprintf(stderr, "iocorr: warning: the profile is kept without the prefetch cost (%s): predict --prefetch will not count what a prefetcher's reads cost the command\n", d.PrefetchCostNA)
			}
			if err := output.DiskProfile(stdout, *format, d); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "iocorr: note: the profile of %s is kept in %s; record copies it into the runs of models on that disk\n", d.Device, kept)
			return nil
		}
		o.Command = args
		checks := doctor.Run(o)
		if err := writeChecks(stdout, *format, checks); err != nil {
			return err
		}
		if doctor.Failed(checks) {
			fmt.Fprintln(stderr, "iocorr: doctor: required checks failed; record will not work here")
			return exitError{1}
		}
		return nil
	}
}

// writeChecks prints a row per check; a table shows the status as ✓ or ✗.
func writeChecks(w io.Writer, format output.Format, checks []doctor.Check) error {
	rw := output.New(w, format, []output.Column{{Name: "check"}, {Name: "status"}, {Name: "detail"}})
	for _, c := range checks {
		mark := "✗"
		switch c.Status {
		case doctor.OK:
			mark = "✓"
		case doctor.Fallback:
			mark = "~"
		}
		if err := rw.Row(output.Text(c.Name), output.TextAs(string(c.Status), mark), output.Text(c.Detail)); err != nil {
			return err
		}
	}
	return rw.Close()
}
