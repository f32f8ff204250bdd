package main

import (
	"fmt"
	"maps"
	"slices"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

// countersNA reads which counters the run in dir did not measure (its
// probe tier left their probes off) and notes each on stderr once: a
// table has no other place for the reason.
func countersNA(dir string) (output.CounterNA, error) {
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(event.CounterFields))
	for i := range event.CounterFields {
		names[i] = event.CounterFields[i].Name
	}
	na := output.CounterNA(meta.CountersNA(names))
	// One note per reason, naming its counters.
	byReason := map[string][]string{}
	for col, why := range na {
		byReason[why] = append(byReason[why], col)
	}
	for _, why := range slices.Sorted(maps.Keys(byReason)) {
		cols := byReason[why]
		slices.Sort(cols)
		fmt.Fprintf(stderr, "iocorr: note: %v NA: %s\n", cols, why)
	}
	return na, nil
}

// withSnapshots adds the run's residency snapshots to o: a run of the
// default tier takes its residency from them.
func withSnapshots(dir string, o stats.Options) (stats.Options, error) {
	snaps, err := rundir.ReadSnapshots(dir)
	o.Snapshots = snaps
	return o, err
}
