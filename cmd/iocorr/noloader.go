//go:build !linux || noloader

package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"
)

// Recording needs the BPF loader, and pinning Linux's memory cgroups:
// elsewhere record, sweep, doctor, pin and prefetch are named but only say so, and a run recorded on Linux
// is ingested, queried, reported and exported here as there. The tag
// noloader builds the same on Linux, so that a test runs what macOS and
// Windows build.
func init() {
	for _, name := range []string{"record", "sweep", "doctor", "pin", "prefetch"} {
		register(&command{
			name:    name,
			summary: "Linux only (a run recorded there is ingested, queried and reported here)",
			usage:   "(Linux only)",
			flags:   linuxOnly(name),
		})
	}
}

// linuxOnly takes any flags, so that a command line written for Linux
// gets the one line below rather than a flag error.
func linuxOnly(name string) func(fs *pflag.FlagSet) func(context.Context, []string) error {
	return func(fs *pflag.FlagSet) func(context.Context, []string) error {
		fs.ParseErrorsAllowlist.UnknownFlags = true
		return func(context.Context, []string) error {
			fmt.Fprintf(stderr, "iocorr %s: Linux only\n", name)
			return exitError{code: 1}
		}
	}
}

// runShimIfChild has nothing to do: no held child is started here.
func runShimIfChild() {}
