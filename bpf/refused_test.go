package bpf

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/iocorr/iocorr/rundir"
)

// An optional capability whose program an old kernel's verifier refuses
// is NA with the verifier's first words, and so is every capability whose
// path needs its hooks (the readahead trigger rebuilt from the page
// cache's adds); a refusal of a required capability's program, or an
// error that is no refusal, demotes nothing: Open then fails, saying why.
func TestAVerifierRefusalMakesOnlyItsOptionalCapabilitiesNA(t *testing.T) {
	refusal := func(prog string) error {
		return fmt.Errorf("program %s: load program: %w", prog, &ebpf.VerifierError{
			Cause: errors.New("permission denied"),
			Log:   []string{"combined stack size of 2 calls is 544. Too large"},
		})
	}
	for _, tc := range []struct {
		name    string
		prog    string
		err     error
		wantNA  []string
		dropped []string
	}{
		{"page cache program", "page_add", refusal("page_add"), []string{CapPageCache, CapReadahead}, []string{"page_add", "page_del"}},
		// The fault offsets' programs only keep the fault programs' VMA
		// cache: without those, no offset is recorded.
		{"major-fault program", "fault_major", refusal("fault_major"), []string{CapFaults, CapOffsets, CapFaultWait}, []string{"fault_begin", "fault_major", "fault_minor", "vma_enter_mremap", "fault_switch"}},
		// The faults go on without their wait.
		{"fault wait program", "fault_switch", refusal("fault_switch"), []string{CapFaultWait}, []string{"fault_switch"}},
		{"required program", "proc_fork", refusal("proc_fork"), nil, nil},
		{"no refusal", "page_add", fmt.Errorf("program page_add: %w", errors.New("map create: operation not permitted")), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{Probes: rundir.ProbeSet{PageCache: true}}
			caps := choose(fakeKernel("mm_filemap_fault", "readahead"), opts.wanted)
			drop := demoteRefused(caps, tc.err)
			var na []string
			for _, c := range caps {
				if c.path == nil && !c.Off {
					na = append(na, c.Name)
					// The verifier's one line, as cilium/ebpf gives it.
					if want := VerifierRefused + tc.prog + ": permission denied: combined stack size"; !strings.HasPrefix(c.Why, want) {
						t.Errorf("%s NA: %q, want it to begin %q", c.Name, c.Why, want)
					}
					if !c.Refused() {
						t.Errorf("%s NA (%q) is not reported as refused: record would not warn", c.Name, c.Why)
					}
				} else if c.Refused() {
					t.Errorf("%s (path %q) is reported as refused", c.Name, c.Path)
				}
			}
			if !slices.Equal(na, tc.wantNA) {
				t.Errorf("NA %v, want %v", na, tc.wantNA)
			}
			for _, p := range tc.dropped {
				if !slices.Contains(drop, p) {
					t.Errorf("programs left out %v, want %s among them", drop, p)
				}
			}
			if tc.dropped == nil && len(drop) != 0 {
				t.Errorf("programs left out %v, want none", drop)
			}
		})
	}
}
