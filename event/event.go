// Package event is iocorr's data model: the attributed event, the counters
// charged to a token, tensor, expert and op, the tensor dictionary and the
// per-run summaries the store keeps. It is the floor every other package
// stands on: the correlator produces these values, the store encodes them,
// and stats, report, perfetto and the exports read them. It imports no BPF
// package, so the read side never links the loader; the kernel's enum values
// (phase, fault class) are tied to the wire types by the correlator's one
// mapping (correlate/enums.go), checked at compile time.
package event

import "strconv"

// Kind is what an attributed event is.
type Kind uint8

const (
	KindFault   Kind = 1
	KindPageAdd Kind = 2
	KindPageDel Kind = 3
	KindBlock   Kind = 4
	KindRead    Kind = 5 // a read syscall or io_uring read of a model file
)

var kindNames = [...]string{"", "fault", "page_add", "page_delete", "block", "read"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k > 0 {
		return kindNames[k]
	}
	return "kind" + strconv.Itoa(int(k))
}

// Phase values, as stamped in the kernel (enum phase).
const (
	PhaseNone    uint8 = 0
	PhasePrefill uint8 = 1
	PhaseDecode  uint8 = 2
)

// PhaseOfBatch is the phase of a llama_decode call of a batch of n
// tokens: the prompt's batches are the prefill, one token a call is a
// decode; none for an empty batch.
func PhaseOfBatch(n int32) uint8 {
	switch {
	case n > 1:
		return PhasePrefill
	case n == 1:
		return PhaseDecode
	}
	return PhaseNone
}

// PhaseName names a phase for output.
func PhaseName(p uint8) string {
	switch p {
	case PhasePrefill:
		return "prefill"
	case PhaseDecode:
		return "decode"
	}
	return "none"
}

// Event is one attributed event: one raw event's share in one tensor
// slice. A folio or block request spanning several tensors yields one
// Event per slice.
//
// Req, the request id, names the raw record an event is a slice of: a
// fault, a folio or run of folios, a block request, a read call. The
// correlator numbers records from 1 in spool order, so the slices of one
// record share it and no two records of a run do; readers put a request
// back together by it (store.Store.Records). 0 is no record (events made
// by hand): each such event stands alone. 32 bits keep Event at 64 bytes;
// after 2³² records the ids wrap, which readers never see: they join only
// consecutive slices, and two records 2³² apart are never consecutive.
type Event struct {
	Ts      uint64 // completion time, CLOCK_MONOTONIC ns
	Dur     uint64 // fault stall (ts − start_ts) or block latency (ts − issue_ts)
	Offset  int64  // within the tensor; within the file for pseudo tensors
	Bytes   uint64 // bytes of this slice
	Tensor  uint32
	Token   uint32
	Op      uint32 // op id from op probes, 0 when unknown (see Result.OpOf)
	Tid     uint32
	Req     uint32 // request id: the raw record this event is a slice of
	Trigger uint32 // page add: tensor whose fault read it ahead, NoTensor otherwise
	Expert  int16  // -1 for tensors without experts
	Kind    Kind
	Phase   uint8
	Class   uint8 // fault class; for blocks 0 read, 1 write; for reads the call kind
}

// Fault classes (enum fault_class) and block directions, as in Event.Class.
const (
	ClassMinor       uint8 = 0
	ClassMajor       uint8 = 1
	ClassUnaccounted uint8 = 2
	ClassRead        uint8 = 0
	ClassWrite       uint8 = 1
	// ClassCompletionUnseen is added to a block request's direction when
	// BPF never saw it complete: its bytes were read or written, its
	// latency is unknown (Dur 0, shown NA).
	ClassCompletionUnseen uint8 = 2
	// ClassBeneath marks a block read of a file a model's disk is stacked
	// on (a loop device's backing file): the same bytes as a request of
	// the model's disk, read again. Kept as events, counted in no figure.
	ClassBeneath uint8 = 4
)

// BlockWrite says whether a block event's class is a write (or another
// operation that is not a read).
func BlockWrite(class uint8) bool { return class&ClassWrite != 0 }

// BlockRead says whether a block request's class is a read that counts:
// not a write, not a read beneath a model's disk.
func BlockRead(class uint8) bool { return class&(ClassWrite|ClassBeneath) == 0 }

// CompletionUnseen says whether a block event's completion was never seen,
// so that it has no latency.
func (e *Event) CompletionUnseen() bool {
	return e.Kind == KindBlock && e.Class&ClassCompletionUnseen != 0
}

// Read call kinds (enum read_kind), as in a read event's Class.
const (
	ReadRead    uint8 = 1
	ReadPread64 uint8 = 2
	ReadReadv   uint8 = 3
	ReadPreadv  uint8 = 4
	ReadPreadv2 uint8 = 5
	ReadIOUring uint8 = 6 // IORING_OP_READ, _READV or _READ_FIXED
)

var readKindNames = [...]string{ReadRead: "read", ReadPread64: "pread64", ReadReadv: "readv", ReadPreadv: "preadv",
	ReadPreadv2: "preadv2", ReadIOUring: "io_uring read"}

// ReadKindName names a read event's call kind.
func ReadKindName(k uint8) string {
	if int(k) < len(readKindNames) && readKindNames[k] != "" {
		return readKindNames[k]
	}
	return "read call"
}

// ClassName names an event's class: minor, major or unaccounted for a
// fault, read or write for a block request, "" for page-cache events.
func (e *Event) ClassName() string {
	switch e.Kind {
	case KindFault:
		switch e.Class {
		case ClassMinor:
			return "minor"
		case ClassMajor:
			return "major"
		}
		return "unaccounted"
	case KindBlock:
		dir := "read"
		if BlockWrite(e.Class) {
			dir = "write"
		}
		if e.Class&ClassBeneath != 0 {
			dir += " beneath"
		}
		if e.CompletionUnseen() {
			return dir + ", completion unseen"
		}
		return dir
	}
	return ""
}

// Sink receives attributed events. The pointer is valid only during the
// call: a sink copies what it keeps.
type Sink interface {
	Event(*Event) error
}

// SinkFunc adapts a function to a Sink.
type SinkFunc func(*Event) error

// Event calls f.
func (f SinkFunc) Event(e *Event) error { return f(e) }
