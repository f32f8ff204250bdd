package recorder

import (
	"strings"

	"github.com/iocorr/iocorr/rundir"
)

// Probes are the probe sets of a recording, as `--probe` names them
// (graph,ops,pagecache,sched,faults): graph, the default tier, is always on.
type Probes struct {
	// Ops also probes every op function (costlier) besides one hit per
	// graph.
	Ops bool
	// PageCache is the pagecache tier: page-cache adds and evictions of
	// the model files are recorded (bpf.Options.PageCache).
	PageCache bool
	// Sched records context switches and wakeups of traced threads.
	Sched bool
	// Faults records every fault outside the model files one by one
	// (anonymous memory, other files): by default the kernel counts them
	// per token, thread and class (bpf.Options.FaultsOneByOne).
	Faults bool
}

// ParseProbes reads a comma-separated list of probe sets; a name it does
// not know is an *OptionError.
func ParseProbes(s string) (Probes, error) {
	var p Probes
	for _, set := range strings.Split(s, ",") {
		switch set {
		case rundir.ProbeSetGraph:
		case rundir.ProbeSetOps:
			p.Ops = true
		case rundir.ProbeSetSched:
			p.Sched = true
		case rundir.ProbeSetFaults:
			p.Faults = true
		case rundir.TierPageCache:
			p.PageCache = true
		default:
			return p, optionf("--probe must be graph or ops, and pagecache, sched or faults, comma-separated; not %q", s)
		}
	}
	return p, nil
}

// String is the probe sets as meta.json's probe_set spells them: "graph"
// or "ops", then ",pagecache", ",sched" and ",faults" when on.
func (p Probes) String() string {
	s := rundir.ProbeSetGraph
	if p.Ops {
		s = rundir.ProbeSetOps
	}
	if p.PageCache {
		s += "," + rundir.TierPageCache
	}
	if p.Sched {
		s += "," + rundir.ProbeSetSched
	}
	if p.Faults {
		s += "," + rundir.ProbeSetFaults
	}
	return s
}

// Tier is the run's probe tier (rundir.Meta.Tier).
func (p Probes) Tier() string {
	if p.PageCache {
		return rundir.TierPageCache
	}
	return rundir.TierDefault
}
