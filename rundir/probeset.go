package rundir

import (
	"fmt"
	"strings"
)

// ProbeSet is the probe sets of a recording, as `record --probe` names
// them (graph,ops,pagecache,sched,faults): graph, the default tier, is
// always on. It is the one value from the flag (Set) to its effects: the BPF
// tracer's options take it whole (bpf.Options.Probes), and meta.json's
// probe_set and tier are written from it (String, Tier), read back by
// Meta.HasProbeSet.
type ProbeSet struct {
	// Ops also probes every op function (costlier) besides one hit per
	// graph.
	Ops bool
	// PageCache is the pagecache tier: page-cache adds and evictions of
	// the model files are recorded.
	PageCache bool
	// Sched records context switches and wakeups of traced threads.
	Sched bool
	// Faults records every fault outside the model files one by one
	// (anonymous memory, other files): by default the kernel counts them
	// per token, thread and class.
	Faults bool
}

// ParseProbeSet reads a comma-separated list of probe sets.
func ParseProbeSet(s string) (ProbeSet, error) {
	var p ProbeSet
	for _, set := range strings.Split(s, ",") {
		switch set {
		case ProbeSetGraph:
		case ProbeSetOps:
			p.Ops = true
		case ProbeSetSched:
			p.Sched = true
		case ProbeSetFaults:
			p.Faults = true
		case TierPageCache:
			p.PageCache = true
		default:
			return p, fmt.Errorf("--probe must be graph or ops, and pagecache, sched or faults, comma-separated; not %q", s)
		}
	}
	return p, nil
}

// String is the probe sets as meta.json's probe_set spells them: "graph"
// or "ops", then ",pagecache", ",sched" and ",faults" when on.
func (p ProbeSet) String() string {
	s := ProbeSetGraph
	if p.Ops {
		s = ProbeSetOps
	}
	if p.PageCache {
		s += "," + TierPageCache
	}
	if p.Sched {
		s += "," + ProbeSetSched
	}
	if p.Faults {
		s += "," + ProbeSetFaults
	}
	return s
}

// Set reads --probe into p (a pflag.Value: the flag is the value).
func (p *ProbeSet) Set(s string) error {
	v, err := ParseProbeSet(s)
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// Type names the value in a flag's help.
func (p *ProbeSet) Type() string { return "sets" }

// Tier is the run's probe tier (Meta.Tier).
func (p ProbeSet) Tier() string {
	if p.PageCache {
		return TierPageCache
	}
	return TierDefault
}
