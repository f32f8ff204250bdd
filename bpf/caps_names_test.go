package bpf

import (
	"slices"
	"testing"

	"github.com/iocorr/iocorr/rundir"
)

// The read side names capabilities without linking the loader: each name
// rundir uses to make figures NA must be one of the table's, or a renamed
// capability would silently leave its figures as zeros.
func TestTheReadSideNamesTheTablesCapabilities(t *testing.T) {
	var names []string
	for _, c := range Capabilities {
		names = append(names, c.Name)
	}
	read := []string{rundir.CapLoops, rundir.CapFaultOffsets, rundir.CapFaults, rundir.CapPageCache, rundir.CapReadahead, rundir.CapBlock, rundir.CapReads}
	for c := range rundir.CapabilityCounters {
		read = append(read, c)
	}
	for _, n := range read {
		if !slices.Contains(names, n) {
			t.Errorf("rundir names capability %q, which bpf.Capabilities has not (it has %v)", n, names)
		}
	}
}
