package correlate

import (
	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/event"
)

// The one mapping from the kernel's enums (bpf2go's output of iocorr.h) to
// the event model's values. The kernel stamps phase and fault class as
// uint8 fields that the correlator copies into events unchanged, so the
// mapping is the identity, and it must stay one: each line below is a
// constant index that is out of range, and fails to compile, as soon as the
// header and the event model disagree.
var (
	_ = [1]struct{}{}[event.PhaseNone^uint8(bpf.IocorrPhasePHASE_NONE)]
	_ = [1]struct{}{}[event.PhasePrefill^uint8(bpf.IocorrPhasePHASE_PREFILL)]
	_ = [1]struct{}{}[event.PhaseDecode^uint8(bpf.IocorrPhasePHASE_DECODE)]
	_ = [1]struct{}{}[event.ClassMinor^uint8(bpf.IocorrFaultClassFAULT_MINOR)]
	_ = [1]struct{}{}[event.ClassMajor^uint8(bpf.IocorrFaultClassFAULT_MAJOR)]
	_ = [1]struct{}{}[event.ClassUnaccounted^uint8(bpf.IocorrFaultClassFAULT_UNACCOUNTED)]
)
