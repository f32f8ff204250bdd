package main

import (
	"fmt"
	"os"
	"runtime/debug"

	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

// heapLimit is the Go heap the commands that read or build a store aim
// under: they stream, and what they hold is bounded, but the collector
// lets garbage reach the live heap's size again before it runs; near
// this limit it runs sooner. It is a soft limit: a command that needs
// more gets it. GOMEMLIMIT, when set, wins.
const heapLimit = 160 << 20

// boundHeap sets heapLimit, unless GOMEMLIMIT is set.
func boundHeap() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(heapLimit)
	}
}

// openRunMeta opens DIR's store and reads its metadata; a partial run's
// status goes to stderr.
func openRunMeta(dir string) (*index.Store, *rundir.Meta, error) {
	return openRunAs(dir, "")
}

// openRunAs opens DIR's store and metadata, under the read side's heap
// bound, and prints the run's status on stderr when it is partial, after
// label when one names the run among several.
func openRunAs(dir, label string) (*index.Store, *rundir.Meta, error) {
	boundHeap()
	st, err := index.Open(dir)
	if err != nil {
		return nil, nil, err
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	if status := meta.Status(); status != "" {
		if label != "" {
			status = label + ": " + status
		}
		fmt.Fprintf(stderr, "iocorr: warning: %s\n", status)
	}
	return st, meta, nil
}
