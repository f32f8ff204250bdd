package rundir_test

import (
	"testing"

	"github.com/iocorr/iocorr/rundir"
)

// TestProbeSetAsAFlagHoldsWhatItReadsAndKeepsItsValueOnAMistake: --probe
// is bound to the value itself; a list it cannot read leaves the value
// (the default, graph) as it was.
func TestProbeSetAsAFlagHoldsWhatItReadsAndKeepsItsValueOnAMistake(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want rundir.ProbeSet
		ok   bool
	}{
		{"graph", rundir.ProbeSet{}, true},
		{"ops,pagecache", rundir.ProbeSet{Ops: true, PageCache: true}, true},
		{"sched,faults", rundir.ProbeSet{Sched: true, Faults: true}, true},
		{"ops,everything", rundir.ProbeSet{}, false},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			var p rundir.ProbeSet
			err := p.Set(tc.flag)
			if (err == nil) != tc.ok || p != tc.want {
				t.Errorf("Set(%q): %+v, %v; want %+v (ok %v)", tc.flag, p, err, tc.want, tc.ok)
			}
		})
	}
}
