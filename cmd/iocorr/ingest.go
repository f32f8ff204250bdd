package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

func init() {
	register(&command{
		name:    "ingest",
		summary: "attribute a recorded run's events to tensors and build its query store",
		usage:   "[--force] [DIR]",
		flags:   ingestFlags,
		man:     ingestManual,
	})
}

func ingestFlags(fs *pflag.FlagSet) func(ctx context.Context, args []string) error {
	force := fs.Bool("force", false, "rebuild the store even when it is complete")
	return func(ctx context.Context, args []string) error {
		dir := rundir.Default
		switch len(args) {
		case 0:
		case 1:
			dir = args[0]
		default:
			return usagef("ingest: takes one run directory, got %d arguments", len(args))
		}
		store.BoundHeap()
		sum, err := pipeline.Ingest(ctx, dir, pipeline.Options{Force: *force})
		if err != nil {
			return fmt.Errorf("ingest: %w", err)
		}
		printBuildSummary(sum, dir)
		return nil
	}
}

func printBuildSummary(sum pipeline.Summary, dir string) {
	if sum.AlreadyBuilt {
		fmt.Fprintf(stderr, "iocorr: store of %s is up to date (%d records, %d events); --force rebuilds it\n", dir, sum.Records, sum.Events)
		return
	}
	fmt.Fprintf(stderr, "iocorr: ingested %d records into %d attributed events, %d tokens, in %s (%.0f records/s)\n",
		sum.Records, sum.Events, sum.Tokens, time.Duration(sum.BuildNS).Round(time.Millisecond), sum.RecordsPerSecond())
	if sum.Short+sum.Unknown+sum.BadFrames > 0 {
		fmt.Fprintf(stderr, "iocorr: skipped %d short, %d unknown records and %d damaged frames\n", sum.Short, sum.Unknown, sum.BadFrames)
	}
	var lost uint64
	for _, n := range sum.Lost {
		lost += n
	}
	if lost > 0 {
		fmt.Fprintf(stderr, "iocorr: warning: the kernel lost %d events; totals are lower bounds\n", lost)
	}
	if sum.Incomplete {
		fmt.Fprintf(stderr, "iocorr: warning: the recording stopped early (see meta.json warnings); the store holds what was recorded\n")
	}
	if sum.MapsMissing > 0 {
		fmt.Fprintf(stderr, "iocorr: warning: %d maps snapshots are missing; faults the kernel did not resolve stay anonymous\n", sum.MapsMissing)
	}
	if len(sum.NotFileBacked) > 0 {
		// Seen on AMX CPUs: ggml's CPU backend copies F16/Q8_0 mat-mul
		// weights into an extra buffer (AMX, CPU_REPACK) while loading.
		fmt.Fprintf(stderr, "iocorr: warning: %d weights were read from anonymous memory, not the model file: llama.cpp's CPU backend copied them into an extra buffer (AMX/CPU_REPACK repacking) at load, so their reads are no file I/O and show no faults (a type it does not repack, e.g. BF16, or llama.cpp's --no-repack keeps them file-backed): %v\n", len(sum.NotFileBacked), sum.NotFileBacked)
	}
}
