package bpf

import (
	"fmt"
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
	read := []string{rundir.CapLoops, rundir.CapFaultOffsets, rundir.CapFaults, rundir.CapPageCache, rundir.CapReadahead, rundir.CapBlock, rundir.CapReads, rundir.CapFaultWait}
	for c := range rundir.CapabilityCounters {
		read = append(read, c)
	}
	for _, n := range read {
		if !slices.Contains(names, n) {
			t.Errorf("rundir names capability %q, which bpf.Capabilities has not (it has %v)", n, names)
		}
	}
}

// Every path names the release that first has all it needs (README's
// table gives the commits), and a fallback never needs a newer kernel
// than the path it stands in for: it is there for older kernels.
func TestEachPathNamesTheFirstKernelWithItsNeeds(t *testing.T) {
	version := func(s string) (v [2]int, ok bool) {
		n, err := fmt.Sscanf(s, "%d.%d", &v[0], &v[1])
		return v, err == nil && n == 2 && fmt.Sprintf("%d.%d", v[0], v[1]) == s
	}
	for _, c := range Capabilities {
		var prev [2]int
		for i, p := range c.Paths {
			v, ok := version(p.Kernel)
			if !ok {
				t.Errorf("%s, path %q: kernel %q is not a release (major.minor)", c.Name, p.Name, p.Kernel)
				continue
			}
			if i > 0 && (v[0] > prev[0] || v[0] == prev[0] && v[1] > prev[1]) {
				t.Errorf("%s: fallback %q needs %s, newer than the path before it (%d.%d)", c.Name, p.Name, p.Kernel, prev[0], prev[1])
			}
			prev = v
		}
	}
}
