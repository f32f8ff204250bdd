package rundir

import (
	"fmt"

	"github.com/iocorr/iocorr/ggml"
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
// no probe on ggml.SymGetRows attached (a build that inlined or stripped it,
// or no llama.cpp at all), or a ggml struct layout that failed validation.
func (m *Meta) PicksNA() string {
	if m.Layout != nil && m.Layout.Invalid != "" {
		return "the router's expert picks were not recorded: the ggml struct layout failed validation against the target (" + m.Layout.Invalid + ")"
	}
	for _, c := range m.Capabilities {
		if c.Name == CapLoops && !c.Primary {
			return "the router's expert picks were not recorded: the kernel has no bpf_loop (5.17), which their probe loops with (" + c.Why + ")"
		}
	}
	if m.attached(func(p *Probe) bool { return p.Symbol == ggml.SymGetRows }) {
		return ""
	}
	return "the router's expert picks were not recorded: no probe on " + ggml.SymGetRows + " attached in this run (iocorr doctor -- CMD says which probe points the build has)"
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
