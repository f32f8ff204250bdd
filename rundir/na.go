package rundir

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// TracepointSysEnterRead is the tracepoint behind the bytes that read(2)
// and its kin requested, named as the recorder writes it in Probe.Target.
// The probe points of llama.cpp and ggml are named by package ggml, which
// links no loader either.
const TracepointSysEnterRead = "syscalls/sys_enter_read"

// The methods below say why a figure of the run is NA ("" when it was
// measured), in the words every output uses: a figure that was not
// measured is never shown as a zero.

// PicksNA says why the run has no record of the router's expert picks:
// no probe on SymbolGetRows attached (a build that inlined or stripped it,
// or no llama.cpp at all), a ggml struct layout that failed validation, or
// rows of expert ids past the bounded loop a kernel without bpf_loop reads
// them with (a partial record would undercount).
func (m *Meta) PicksNA() string {
	if m.Layout != nil && m.Layout.Invalid != "" {
		return "the router's expert picks were not recorded: the ggml struct layout failed validation against the target (" + m.Layout.Invalid + ")"
	}
	if m.LoopsCut != nil && m.LoopsCut.ExpertRows > 0 {
		return fmt.Sprintf("the router's expert picks are incomplete: %d token rows of expert ids lay past the bounded loop of the kernel's probe, which has no bpf_loop (5.17)", m.LoopsCut.ExpertRows)
	}
	if m.attached(func(p *Probe) bool { return p.Symbol == SymbolGetRows }) {
		return ""
	}
	return "the router's expert picks were not recorded: no probe on " + SymbolGetRows + " attached in this run (iocorr doctor -- CMD says which probe points the build has)"
}

// NodesNA says which graph nodes failed validation under a layout that
// holds ("" when none did): each is left out, so the op and device of a
// weight only such nodes read are unknown.
func (m *Meta) NodesNA() string {
	if m.Layout == nil || m.Layout.Nodes == nil || m.Layout.Nodes.Failed == 0 {
		return ""
	}
	n := m.Layout.Nodes
	names := make([]string, 0, min(len(n.Nodes), 3))
	for _, f := range n.Nodes[:min(len(n.Nodes), 3)] {
		names = append(names, fmt.Sprintf("%s reading %s: %s", f.Node, f.Weight, f.Why))
	}
	more := ""
	if len(n.Nodes) > len(names) {
		more = fmt.Sprintf(" and %d more", len(n.Nodes)-len(names))
	}
	return fmt.Sprintf("%d of %d graph nodes failed validation and are left out, their weights' op and device not taken from them (%s%s)",
		n.Failed, n.Checked, strings.Join(names, "; "), more)
}

// FaultDetailNA says why the faults outside the model files are not in
// the record one by one ("" when they are): their counts and summed stall
// per token, thread, tensor and op are exact, but each one's time,
// address and stall are not there to draw, list or join.
func (m *Meta) FaultDetailNA() string {
	if m.FaultsCounted == "" {
		return ""
	}
	return "faults outside the model files (" + m.FaultsCounted + ") were counted in the kernel per token and thread, not recorded one by one: their counts and summed stall are exact, each one's time, address and stall is not in the record (record with --probe faults for them)"
}

// LoopsCut is what the kernel's bounded loops left unread (Meta.LoopsCut).
type LoopsCut struct {
	// GraphNodes are graph nodes never walked: the graph was not computed
	// again often enough to walk past the per-computation bound. Their
	// weights' consumer ops are not named (correlate names the op of a
	// weight from the first node that reads it).
	GraphNodes uint64 `json:"graph_nodes"`
	// ExpertRows are token rows of expert ids past the per-node bound.
	ExpertRows uint64 `json:"expert_rows"`
}

// ReadsNA says why "bytes requested" is NA: "" when the recorder traced
// the read syscalls (a zero is then a measured zero: the command read
// nothing of its models by read(2), as a mmap load does).
func (m *Meta) ReadsNA() string {
	if m.attached(func(p *Probe) bool { return p.Target == TracepointSysEnterRead }) {
		return ""
	}
	return "not measured: this run's recorder did not trace read syscalls"
}

func (m *Meta) attached(is func(*Probe) bool) bool {
	for i := range m.Probes {
		if p := &m.Probes[i]; is(p) && p.Error == "" {
			return true
		}
	}
	return false
}

// ResidencyNA says why the file's page-cache residency during the run is
// unknown: some but not all of its pages were resident before the run,
// and the record has no map of which. None or all resident is known.
func (f *ModelFile) ResidencyNA() string {
	if f.ResidentBefore == 0 || f.ResidentBefore == f.Pages {
		return ""
	}
	return fmt.Sprintf("not measured: %d of %d pages of %s were resident before the run and the record has no per-page map of them (record with --cold)", f.ResidentBefore, f.Pages, f.Path)
}

// The probe tiers a run may have been recorded in (Meta.Tier).
const (
	// TierDefault records faults with their file offsets, block requests,
	// read calls, tokens, graphs and the router's picks: no per-folio
	// page-cache program.
	TierDefault = "default"
	// TierPageCache adds every page-cache add and eviction of the models.
	TierPageCache = "pagecache"
)

// The probe sets (record --probe) as Meta.ProbeSet names them, beside
// TierPageCache: graph or ops first, then the others that were on.
const (
	ProbeSetGraph  = "graph"
	ProbeSetOps    = "ops"
	ProbeSetSched  = "sched"
	ProbeSetFaults = "faults"
)

// HasProbeSet says whether the run was recorded with the probe set name
// (a ProbeSet constant or TierPageCache). A run that names none recorded
// the default, graph.
func (m *Meta) HasProbeSet(name string) bool {
	return slices.Contains(strings.Split(cmp.Or(m.ProbeSet, ProbeSetGraph), ","), name)
}

// SymbolGetRows is the ggml function whose probe records the router's
// expert picks (ggml.SymGetRows), named as the recorder writes it in
// Probe.Symbol.
const SymbolGetRows = "ggml_compute_forward_get_rows"

// TracepointPageAdd is the tracepoint behind page-cache adds, named as the
// recorder writes it in Probe.Target.
const TracepointPageAdd = "filemap/mm_filemap_add_to_page_cache"

// PageCacheCounters are the counters (event.CounterFields names) that only
// page-cache add and eviction records measure.
var PageCacheCounters = []string{"pages_added", "bytes_added", "readahead_trigger_bytes", "pages_evicted", "bytes_evicted"}

// PageCacheNA says why the run has no page-cache adds and evictions ("" when
// it has them): it was recorded in a tier without them. Landed readahead,
// the residency replayed from them and refaults are then NA too.
func (m *Meta) PageCacheNA() string {
	if why := m.CapabilityNA(CapPageCache); why != "" {
		return why
	}
	if m.attached(func(p *Probe) bool { return p.Target == TracepointPageAdd }) {
		return ""
	}
	tier := m.Tier
	if tier == "" {
		tier = "an unknown"
	}
	return "not measured: page-cache adds and evictions are recorded only in the " + TierPageCache + " tier (record --probe " + TierPageCache + "); this run was recorded in the " + tier + " tier"
}

// CapabilityCounters are the counters (event.CounterFields names) each of
// bpf's capabilities measures: a run whose kernel gave the capability no
// path has them NA with the capability's reason. The page cache's are
// PageCacheCounters (PageCacheNA checks its capability first); fault
// offsets always has a path (the mappings seen, at ingest).
var CapabilityCounters = map[string][]string{
	CapFaults:    {"faults", "major_faults", "minor_faults", "unaccounted_faults", "fault_stall_ns", "fault_wait_ns", "fault_preempted_ns"},
	CapPageCache: PageCacheCounters,
	CapReadahead: {"readahead_trigger_bytes"},
	CapBlock:     {"bytes_read", "block_requests"},
	CapReads:     {"bytes_requested"},
	CapFaultWait: {"fault_wait_ns", "fault_preempted_ns"},
}

// Capability names of bpf's table the counters depend on, named here for
// the read side (which links no loader).
const (
	CapFaults    = "faults"
	CapPageCache = "page cache"
	CapReadahead = "readahead trigger"
	CapBlock     = "block I/O"
	CapReads     = "read calls"
	CapFaultWait = "fault wait"
)

// ModelBlockNA says why some model's block requests are not told from
// other files' (ModelFile.BlockNA), "" when every model's are.
func (m *Meta) ModelBlockNA() string {
	for i := range m.Models {
		if why := m.Models[i].BlockNA; why != "" {
			return "model " + m.Models[i].Path + ": " + why
		}
	}
	return ""
}

// CapabilityNA says why the run had no path for the capability named name
// ("" when it had one, was not asked for, or the run predates the table):
// the kernel (or IOCORR_WITHOUT) lacked what every path needs.
func (m *Meta) CapabilityNA(name string) string {
	for _, c := range m.Capabilities {
		if c.Name == name && c.Path == "" && !c.Off {
			why := "not measured: this run's kernel gave the " + name + " capability no path"
			if c.Why != "" {
				why += " (" + c.Why + ")"
			}
			if c.Lost != "" {
				why += ": " + c.Lost
			}
			return why
		}
	}
	return ""
}

// CounterNA says why the counter named name (event.CounterFields) was not
// measured in this run, "" when it was. A capability the kernel did not
// have comes first: its reason is the cause, a missing probe only the
// symptom.
func (m *Meta) CounterNA(name string) string {
	for _, c := range slices.Sorted(maps.Keys(CapabilityCounters)) {
		if slices.Contains(CapabilityCounters[c], name) {
			if why := m.CapabilityNA(c); why != "" {
				return why
			}
		}
	}
	switch {
	case name == "bytes_requested":
		return m.ReadsNA()
	case slices.Contains(PageCacheCounters, name):
		return m.PageCacheNA()
	}
	return ""
}

// CountersNA maps each counter this run did not measure to why.
func (m *Meta) CountersNA(names []string) map[string]string {
	out := map[string]string{}
	for _, n := range names {
		if why := m.CounterNA(n); why != "" {
			out[n] = why
		}
	}
	return out
}
