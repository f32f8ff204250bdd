package rundir_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
)

func TestNAReasonsSayWhyAFigureWasNotMeasured(t *testing.T) {
	picks := rundir.Probe{Kind: "uprobe", Target: "libggml-cpu.so", Symbol: ggml.SymGetRows}
	reads := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointSysEnterRead}
	failed := func(p rundir.Probe) rundir.Probe { p.Error = "no such symbol"; return p }
	tests := []struct {
		name             string
		meta             rundir.Meta
		wantPicks, reads string // substrings of the reasons; "" when measured
	}{
		{"both attached", rundir.Meta{Probes: []rundir.Probe{picks, reads}}, "", ""},
		{"nothing attached", rundir.Meta{}, "no probe on " + ggml.SymGetRows + " attached", "did not trace read syscalls"},
		{"probes that failed to attach", rundir.Meta{Probes: []rundir.Probe{failed(picks), failed(reads)}},
			"no probe on " + ggml.SymGetRows + " attached", "did not trace read syscalls"},
		{"a layout that failed validation", rundir.Meta{Probes: []rundir.Probe{picks, reads}, Layout: &rundir.Layout{Invalid: "node 3 has no op"}},
			"failed validation against the target (node 3 has no op)", ""},
		{"bounded loops that read every row", rundir.Meta{Probes: []rundir.Probe{picks, reads}, Capabilities: []rundir.Capability{{Name: rundir.CapLoops, Path: "bounded loops"}},
			LoopsCut: &rundir.LoopsCut{GraphNodes: 7}}, "", ""},
		{"bounded loops that cut rows", rundir.Meta{Probes: []rundir.Probe{picks, reads}, LoopsCut: &rundir.LoopsCut{ExpertRows: 448}},
			"incomplete: 448 token rows of expert ids", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			check := func(what, got, want string) {
				if (want == "") != (got == "") || !strings.Contains(got, want) {
					t.Errorf("%s NA: %q, want %q", what, got, want)
				}
			}
			check("picks", tc.meta.PicksNA(), tc.wantPicks)
			check("reads", tc.meta.ReadsNA(), tc.reads)
		})
	}
}

func TestResidencyIsKnownWhenNoneOrAllPagesWereResident(t *testing.T) {
	for _, tc := range []struct {
		before, pages int64
		known         bool
	}{{0, 10, true}, {10, 10, true}, {3, 10, false}, {0, 0, true}} {
		f := rundir.ModelFile{Path: "m.gguf", ResidentBefore: tc.before, Pages: tc.pages}
		why := f.ResidencyNA()
		if (why == "") != tc.known {
			t.Errorf("%d of %d pages resident before: NA %q, want known %v", tc.before, tc.pages, why, tc.known)
		}
		if !tc.known && !strings.Contains(why, "3 of 10 pages of m.gguf") {
			t.Errorf("the reason does not say which file and how much: %q", why)
		}
	}
}

// A run says which counters its tier measured: the page-cache counters
// only with the page-cache tracepoint attached, bytes requested only with
// the read syscalls traced; the others always.
func TestCounterNAFollowsTheProbesTheTierAttached(t *testing.T) {
	pages := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointPageAdd}
	reads := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointSysEnterRead}
	offByTier := pages
	offByTier.Error = "not attached: the default tier"
	names := make([]string, len(event.CounterFields))
	for i := range event.CounterFields {
		names[i] = event.CounterFields[i].Name
	}
	tests := []struct {
		name string
		meta rundir.Meta
		na   []string
	}{
		{"pagecache tier", rundir.Meta{Tier: rundir.TierPageCache, Probes: []rundir.Probe{pages, reads}}, nil},
		{"default tier", rundir.Meta{Tier: rundir.TierDefault, Probes: []rundir.Probe{offByTier, reads}}, rundir.PageCacheCounters},
		{"default tier, reads not traced", rundir.Meta{Tier: rundir.TierDefault, Probes: []rundir.Probe{offByTier}},
			append(slices.Clone(rundir.PageCacheCounters), "bytes_requested")},
		{"before tiers: every page-cache probe attached", rundir.Meta{Probes: []rundir.Probe{pages, reads}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.meta.CountersNA(names)
			if len(got) != len(tc.na) {
				t.Errorf("NA %v, want %v", got, tc.na)
			}
			for _, n := range tc.na {
				if got[n] == "" {
					t.Errorf("%s measured, want NA", n)
				}
			}
			if why := tc.meta.PageCacheNA(); slices.Contains(tc.na, "pages_added") &&
				!strings.Contains(why, "--probe "+rundir.TierPageCache) {
				t.Errorf("the reason does not say how to measure it: %q", why)
			}
		})
	}
	// Every page-cache counter is a counter of the store.
	for _, n := range rundir.PageCacheCounters {
		if _, ok := event.CounterByName(n); !ok {
			t.Errorf("page-cache counter %s is not in event.CounterFields", n)
		}
	}
}

// A capability the kernel gave no path makes the counters it measures NA
// with its reason, ahead of the tier's; a capability on a fallback, or one
// the run did not ask for, changes nothing.
func TestCounterNAFollowsTheCapabilitiesTheKernelHad(t *testing.T) {
	pages := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointPageAdd}
	reads := rundir.Probe{Kind: "tracepoint", Target: rundir.TracepointSysEnterRead}
	na := func(name, why string) rundir.Capability {
		return rundir.Capability{Name: name, Kernel: "5.8", Lost: "what " + name + " loses", Why: why}
	}
	fallback := rundir.Capability{Name: rundir.CapFaults, Path: "perf page-faults", Kernel: "5.8", Lost: "the error code"}
	names := make([]string, len(event.CounterFields))
	for i := range event.CounterFields {
		names[i] = event.CounterFields[i].Name
	}
	faults := []string{"faults", "major_faults", "minor_faults", "unaccounted_faults", "fault_stall_ns", "fault_wait_ns", "fault_preempted_ns"}
	tests := []struct {
		name string
		caps []rundir.Capability
		na   []string
		why  string // a substring of every NA counter's reason
	}{
		{"every capability has a path", nil, nil, ""},
		{"faults on a fallback", []rundir.Capability{fallback}, nil, ""},
		{"faults NA", []rundir.Capability{na(rundir.CapFaults, "page_fault_user switched off by IOCORR_WITHOUT")}, faults,
			"faults capability no path (page_fault_user switched off by IOCORR_WITHOUT): what faults loses"},
		{"block I/O NA", []rundir.Capability{na(rundir.CapBlock, "block_rq_issue absent")}, []string{"bytes_read", "block_requests"},
			"block I/O capability no path (block_rq_issue absent)"},
		{"read calls NA", []rundir.Capability{na(rundir.CapReads, "syscalls absent")}, []string{"bytes_requested"},
			"read calls capability no path (syscalls absent)"},
		{"page cache NA", []rundir.Capability{na(rundir.CapPageCache, "filemap absent"), na(rundir.CapReadahead, "filemap absent")},
			rundir.PageCacheCounters, "capability no path (filemap absent)"},
		{"page cache off: the tier's reason stays", []rundir.Capability{{Name: rundir.CapPageCache, Off: true}}, nil, ""},
		{"fault wait NA", []rundir.Capability{na(rundir.CapFaultWait, "sched_switch absent")}, []string{"fault_wait_ns", "fault_preempted_ns"},
			"fault wait capability no path (sched_switch absent)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := rundir.Meta{Tier: rundir.TierPageCache, Probes: []rundir.Probe{pages, reads}, Capabilities: tc.caps}
			got := m.CountersNA(names)
			if len(got) != len(tc.na) {
				t.Errorf("NA %v, want %v", got, tc.na)
			}
			for _, n := range tc.na {
				if !strings.Contains(got[n], tc.why) {
					t.Errorf("%s NA %q, want it to say %q", n, got[n], tc.why)
				}
			}
		})
	}
	// Every counter a capability names is a counter of the store.
	for c, ns := range rundir.CapabilityCounters {
		for _, n := range ns {
			if _, ok := event.CounterByName(n); !ok {
				t.Errorf("capability %s names %s, not in event.CounterFields", c, n)
			}
		}
	}
}

func TestHasProbeSetReadsTheCommaSeparatedSets(t *testing.T) {
	tests := []struct {
		probeSet string
		has      []string
		hasNot   []string
	}{
		{"", []string{"graph"}, []string{"ops", "sched", "pagecache", "faults"}},
		{"graph", []string{"graph"}, []string{"ops", "sched", "pagecache", "faults"}},
		{"ops", []string{"ops"}, []string{"graph", "sched", "pagecache", "faults"}},
		{"ops,pagecache,sched", []string{"ops", "pagecache", "sched"}, []string{"graph", "faults"}},
		{"graph,faults", []string{"graph", "faults"}, []string{"ops", "sched", "pagecache"}},
		// A name is a whole set, never a part of one.
		{"graph,schedx", []string{"graph", "schedx"}, []string{"sched", "sch", "", "graph,schedx"}},
	}
	for _, tc := range tests {
		t.Run(tc.probeSet, func(t *testing.T) {
			m := rundir.Meta{ProbeSet: tc.probeSet}
			for _, name := range tc.has {
				if !m.HasProbeSet(name) {
					t.Errorf("HasProbeSet(%q) = false", name)
				}
			}
			for _, name := range tc.hasNot {
				if m.HasProbeSet(name) {
					t.Errorf("HasProbeSet(%q) = true", name)
				}
			}
		})
	}
}
