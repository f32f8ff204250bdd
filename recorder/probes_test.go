package recorder

import (
	"errors"
	"testing"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
)

func TestParseProbesReadsTheProbeSetsAndSpellsThemAsMetaDoes(t *testing.T) {
	tests := []struct {
		flag     string
		want     rundir.ProbeSet
		probeSet string // meta.json's probe_set
		tier     string
	}{
		{"graph", rundir.ProbeSet{}, "graph", rundir.TierDefault},
		{"ops", rundir.ProbeSet{Ops: true}, "ops", rundir.TierDefault},
		{"graph,ops", rundir.ProbeSet{Ops: true}, "ops", rundir.TierDefault},
		{"pagecache", rundir.ProbeSet{PageCache: true}, "graph,pagecache", rundir.TierPageCache},
		{"sched,ops", rundir.ProbeSet{Ops: true, Sched: true}, "ops,sched", rundir.TierDefault},
		{"ops,pagecache,sched", rundir.ProbeSet{Ops: true, PageCache: true, Sched: true}, "ops,pagecache,sched", rundir.TierPageCache},
		{"faults", rundir.ProbeSet{Faults: true}, "graph,faults", rundir.TierDefault},
		{"faults,pagecache,ops", rundir.ProbeSet{Ops: true, PageCache: true, Faults: true}, "ops,pagecache,faults", rundir.TierPageCache},
	}
	for _, tc := range tests {
		t.Run(tc.flag, func(t *testing.T) {
			got, err := ParseProbes(tc.flag)
			if err != nil || got != tc.want {
				t.Fatalf("ParseProbes(%q) = %+v, %v; want %+v", tc.flag, got, err, tc.want)
			}
			if got.String() != tc.probeSet || got.Tier() != tc.tier {
				t.Errorf("probe set %q, tier %q; want %q, %q", got.String(), got.Tier(), tc.probeSet, tc.tier)
			}
			// What meta.json says reads back as the same sets, here and
			// on the read side.
			if again, err := ParseProbes(got.String()); err != nil || again != got {
				t.Errorf("ParseProbes(%q) = %+v, %v", got.String(), again, err)
			}
			m := rundir.Meta{ProbeSet: got.String()}
			read := rundir.ProbeSet{Ops: m.HasProbeSet(rundir.ProbeSetOps), PageCache: m.HasProbeSet(rundir.TierPageCache),
				Sched: m.HasProbeSet(rundir.ProbeSetSched), Faults: m.HasProbeSet(rundir.ProbeSetFaults)}
			if read != got || m.HasProbeSet(rundir.ProbeSetGraph) == got.Ops {
				t.Errorf("rundir reads probe set %q as %+v (graph %v); want %+v", got.String(), read, m.HasProbeSet(rundir.ProbeSetGraph), got)
			}
		})
	}
}

func TestParseProbesRefusesASetItDoesNotKnow(t *testing.T) {
	for _, flag := range []string{"", "all", "ops,", "graph,Ops", "page cache", "fault"} {
		_, err := ParseProbes(flag)
		var bad *OptionError
		if !errors.As(err, &bad) {
			t.Errorf("ParseProbes(%q): %v, want an option error", flag, err)
		}
	}
}

// The read side names the probe behind the router's picks without
// importing ggml; it must be the symbol the recorder probes.
func TestRundirNamesThePicksProbeAsGGMLDoes(t *testing.T) {
	if rundir.SymbolGetRows != ggml.SymGetRows {
		t.Errorf("rundir.SymbolGetRows %q, ggml.SymGetRows %q", rundir.SymbolGetRows, ggml.SymGetRows)
	}
}
