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
	_ = [1]struct{}{}[event.ReadRead^uint8(bpf.IocorrReadKindREAD_READ)]
	_ = [1]struct{}{}[event.ReadPread64^uint8(bpf.IocorrReadKindREAD_PREAD64)]
	_ = [1]struct{}{}[event.ReadReadv^uint8(bpf.IocorrReadKindREAD_READV)]
	_ = [1]struct{}{}[event.ReadPreadv^uint8(bpf.IocorrReadKindREAD_PREADV)]
	_ = [1]struct{}{}[event.ReadPreadv2^uint8(bpf.IocorrReadKindREAD_PREADV2)]
	_ = [1]struct{}{}[event.ReadIOUring^uint8(bpf.IocorrReadKindREAD_IO_URING)]
)
