package main

import (
	"fmt"

	"github.com/iocorr/iocorr/perfetto"
)

// exportPerfetto writes the run in dir as a Perfetto trace to out and
// says on stderr what the trace holds and what it leaves out.
func exportPerfetto(dir, out string, formatGiven bool) error {
	if formatGiven {
		return usagef("export: perfetto is its own format (Perfetto's protobuf trace): drop --format")
	}
	if out == "-" || out == "" {
		return usagef("export: perfetto is binary: give -o FILE (e.g. trace.pftrace)")
	}
	run, err := openRun(dir, "")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer run.Close()
	sum, err := perfetto.WriteFile(out, run, perfetto.Options{})
	if err != nil {
		return fmt.Errorf("export: writing %s: %w", out, err)
	}
	fmt.Fprintf(stderr, "%s: %d tokens, %d graphs, %d ops, %d faults, %d block requests, %d read calls, %d fault→block flows, %d counter tracks (open it in ui.perfetto.dev)\n",
		out, sum.Tokens, sum.Graphs, sum.Ops, sum.Faults, sum.BlockRequests, sum.Reads, sum.Flows, sum.CounterTracks)
	if sum.ThreadStates > 0 {
		fmt.Fprintf(stderr, "%s: %d thread-state slices; traced threads blocked in D state for %.3f s\n", out, sum.ThreadStates, float64(sum.BlockedNS)/1e9)
	}
	if sum.Downsampled != "" {
		fmt.Fprintf(stderr, "iocorr: note: %s\n", sum.Downsampled)
	}
	for _, n := range sum.NotInTrace {
		fmt.Fprintf(stderr, "iocorr: note: not in the trace: %s\n", n)
	}
	return nil
}
