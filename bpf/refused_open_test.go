package bpf_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/bpftest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// A program this kernel's verifier really refuses at Open leaves the
// tracer open: its capability, and every one whose programs went with it
// or that they record, is NA with the verifier's own line and reported
// refused, and every other capability keeps the path it would have taken.
func TestOpenWithARefusedProgramLeavesOnlyWhatItCostNA(t *testing.T) {
	testenv.RequireBPF(t)
	for _, tc := range []struct {
		name   string
		prog   string
		opts   bpf.Options
		wantNA []string
	}{
		{"major-fault program: faults, their offsets and wait", "fault_major", bpf.Options{}, []string{bpf.CapFaults, bpf.CapOffsets, bpf.CapFaultWait}},
		{"page-cache add program: the page cache and the readahead trigger", "page_add", bpf.Options{Probes: rundir.ProbeSet{PageCache: true}}, []string{bpf.CapPageCache, bpf.CapReadahead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := bpf.Detect(bpf.DetectOptions{Probes: tc.opts.Probes})
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.LoadSpec = bpftest.RefusingSpec(tc.prog)
			tr, err := bpf.Open(tc.opts)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer tr.Close()
			var na []string
			for i, c := range tr.Capabilities() {
				if slices.Contains(tc.wantNA, c.Name) {
					na = append(na, c.Name)
					if !c.NA() || !c.Refused() || !strings.HasPrefix(c.Why, bpf.VerifierRefused+tc.prog+": ") || !strings.Contains(c.Why, "invalid bpf_context access") {
						t.Errorf("%s: path %q, NA %v, refused %v, why %q; want NA, refused, with the verifier's line on %s", c.Name, c.Path, c.NA(), c.Refused(), c.Why, tc.prog)
					}
					continue
				}
				if c.Path != want[i].Path || c.Refused() {
					t.Errorf("%s: path %q (refused %v, %q), want %q as without the refusal", c.Name, c.Path, c.Refused(), c.Why, want[i].Path)
				}
			}
			if !slices.Equal(na, tc.wantNA) {
				t.Errorf("capabilities checked NA %v, want %v", na, tc.wantNA)
			}
		})
	}
}
