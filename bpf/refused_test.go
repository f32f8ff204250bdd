package bpf

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
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
		{"major-fault program", "fault_major", refusal("fault_major"), []string{CapFaults, CapOffsets}, []string{"fault_begin", "fault_major", "fault_minor", "vma_enter_munmap"}},
		{"required program", "proc_fork", refusal("proc_fork"), nil, nil},
		{"no refusal", "page_add", fmt.Errorf("program page_add: %w", errors.New("map create: operation not permitted")), nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{PageCache: true}
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

// refusingSpec loads the built-in objects with prog's body replaced by a
// read far past the end of its context, which every verifier refuses
// ("invalid bpf_context access"; a tracepoint's context may be read up to
// 8 KiB in, the attach refusing what the event lacks): no program of ours
// is refused by this kernel, so this is the one way to see a real
// refusal here.
func refusingSpec(prog string) func() (*ebpf.CollectionSpec, error) {
	return func() (*ebpf.CollectionSpec, error) {
		spec, err := LoadIocorr()
		if err != nil {
			return nil, err
		}
		p, ok := spec.Programs[prog]
		if !ok {
			return nil, fmt.Errorf("no program %s", prog)
		}
		// The first instruction keeps the function's name and BTF, not
		// the rest of the old one's metadata (its CO-RE relocation).
		first := asm.LoadMem(asm.R0, asm.R1, math.MaxInt16&^7, asm.DWord).WithSymbol(p.Instructions[0].Symbol())
		p.Instructions = asm.Instructions{btf.WithFuncMetadata(first, btf.FuncMetadata(&p.Instructions[0])), asm.Return()}
		return spec, nil
	}
}

// A program this kernel's verifier really refuses at Open leaves the
// tracer open: its capability, and every one whose programs went with it,
// is NA with the verifier's own line and reported refused, and every other
// capability keeps the path it would have taken.
func TestOpenWithARefusedProgramLeavesOnlyWhatItCostNA(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prog   string
		opts   Options
		wantNA []string
	}{
		{"major-fault program: faults and their offsets", "fault_major", Options{}, []string{CapFaults, CapOffsets}},
		{"page-cache add program: the page cache and the readahead trigger", "page_add", Options{PageCache: true}, []string{CapPageCache, CapReadahead}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, err := Detect(DetectOptions{PageCache: tc.opts.PageCache})
			if err != nil {
				t.Fatal(err)
			}
			tc.opts.LoadSpec = refusingSpec(tc.prog)
			tr := openTracer(t, tc.opts)
			var na []string
			for i, c := range tr.Capabilities() {
				if slices.Contains(tc.wantNA, c.Name) {
					na = append(na, c.Name)
					if !c.NA() || !c.Refused() || !strings.HasPrefix(c.Why, VerifierRefused+tc.prog+": ") || !strings.Contains(c.Why, "invalid bpf_context access") {
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
