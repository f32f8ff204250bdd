package correlate

import (
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/wire"
)

// The one mapping from the kernel's enums (iocorr.h, as package wire has them) to
// the event model's values. The kernel stamps phase and fault class as
// uint8 fields that the correlator copies into events unchanged, so the
// mapping is the identity, and it must stay one: each line below is a
// constant index that is out of range, and fails to compile, as soon as the
// header and the event model disagree.
var (
	_ = [1]struct{}{}[event.PhaseNone^uint8(wire.PhasePHASE_NONE)]
	_ = [1]struct{}{}[event.PhasePrefill^uint8(wire.PhasePHASE_PREFILL)]
	_ = [1]struct{}{}[event.PhaseDecode^uint8(wire.PhasePHASE_DECODE)]
	_ = [1]struct{}{}[event.ClassMinor^uint8(wire.FaultClassFAULT_MINOR)]
	_ = [1]struct{}{}[event.ClassMajor^uint8(wire.FaultClassFAULT_MAJOR)]
	_ = [1]struct{}{}[event.ClassUnaccounted^uint8(wire.FaultClassFAULT_UNACCOUNTED)]
	_ = [1]struct{}{}[event.ReadRead^uint8(wire.ReadKindREAD_READ)]
	_ = [1]struct{}{}[event.ReadPread64^uint8(wire.ReadKindREAD_PREAD64)]
	_ = [1]struct{}{}[event.ReadReadv^uint8(wire.ReadKindREAD_READV)]
	_ = [1]struct{}{}[event.ReadPreadv^uint8(wire.ReadKindREAD_PREADV)]
	_ = [1]struct{}{}[event.ReadPreadv2^uint8(wire.ReadKindREAD_PREADV2)]
	_ = [1]struct{}{}[event.ReadIOUring^uint8(wire.ReadKindREAD_IO_URING)]
)
