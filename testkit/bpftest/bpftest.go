// Package bpftest gives tests a BPF program this kernel's verifier really
// refuses: no program of iocorr's is refused by the kernels the tests run
// on, and a refusal (bpf.Open's demotion, record's warning) is otherwise
// only seen on the old kernels it was found on.
package bpftest

import (
	"fmt"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/iocorr/iocorr/bpf"
)

// RefusingSpec is bpf.Options.LoadSpec for the built-in objects with
// prog's body replaced by a read far past the end of its context, which
// every verifier refuses ("invalid bpf_context access"; a tracepoint's
// context may be read up to 8 KiB in at load, the attach refusing what
// the event lacks, so the read is further).
func RefusingSpec(prog string) func() (*ebpf.CollectionSpec, error) {
	return func() (*ebpf.CollectionSpec, error) {
		spec, err := bpf.LoadIocorr()
		if err != nil {
			return nil, err
		}
		p, ok := spec.Programs[prog]
		if !ok {
			return nil, fmt.Errorf("the BPF objects have no program %s", prog)
		}
		// The first instruction keeps the function's name and BTF, not
		// the rest of the old one's metadata (its CO-RE relocation).
		first := asm.LoadMem(asm.R0, asm.R1, math.MaxInt16&^7, asm.DWord).WithSymbol(p.Instructions[0].Symbol())
		p.Instructions = asm.Instructions{btf.WithFuncMetadata(first, btf.FuncMetadata(&p.Instructions[0])), asm.Return()}
		return spec, nil
	}
}
