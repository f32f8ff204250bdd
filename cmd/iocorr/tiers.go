package main

import (
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

// withSnapshots adds the run's residency snapshots to o: a run of the
// default tier takes its residency from them.
func withSnapshots(dir string, o stats.Options) (stats.Options, error) {
	snaps, err := rundir.ReadSnapshots(dir)
	o.Snapshots = snaps
	return o, err
}
