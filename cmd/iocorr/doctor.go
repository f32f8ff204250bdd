//go:build linux && !noloader

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/doctor"
	"github.com/iocorr/iocorr/output"
)

func init() {
	register(&command{
		name:    "doctor",
		summary: "check that this machine can record, and what a command offers to probe",
		usage:   "[--lib PATH] [-- CMD [ARGS...]]",
		flags:   doctorFlags,
		man:     doctorManual,
	})
}

func doctorFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	var o doctor.Options
	fs.StringArrayVar(&o.Libs, "lib", nil, "also look for probe symbols in this file (repeatable)")
	format := formatFlag(fs)
	return func(ctx context.Context, args []string) error {
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
