package ingest

import (
	"encoding/binary"
	"unsafe"

	"github.com/iocorr/iocorr/wire"
)

// A spool record is a BPF event verbatim: the C struct from bpf/iocorr.h,
// byte for byte, starting with struct event_hdr. Decoding is therefore a
// length check and a pointer cast onto the generated type (package wire), never a
// field-by-field copy into a hand-kept Go twin that could drift from the C
// header. The structs have no implicit padding (iocorr.h guarantees it) and
// the target is little endian, as the BPF programs are.

// hdrSize is the size of struct event_hdr; typeOff is where hdr.type sits.
const (
	hdrSize = int(unsafe.Sizeof(wire.EventHdr{}))
	typeOff = int(unsafe.Offsetof(wire.EventHdr{}.Type))
)

// RecordType returns the event type of a raw record (its hdr.type), 0 if
// the record is too short to hold it.
func RecordType(rec []byte) uint16 {
	if len(rec) < typeOff+2 {
		return 0
	}
	return binary.LittleEndian.Uint16(rec[typeOff:])
}

// Sizes of each event type's struct, indexed by enum event_type; 0 marks
// a value that is not an event type.
var eventSizes = [wire.EventTypeCount]int{
	wire.EventTypeEV_FAULT:         int(unsafe.Sizeof(wire.FaultEvent{})),
	wire.EventTypeEV_FAULT_COUNT:   int(unsafe.Sizeof(wire.FaultCountEvent{})),
	wire.EventTypeEV_FILEMAP_FAULT: int(unsafe.Sizeof(wire.PageEvent{})),
	wire.EventTypeEV_PAGE_ADD:      int(unsafe.Sizeof(wire.PageEvent{})),
	wire.EventTypeEV_PAGE_DEL:      int(unsafe.Sizeof(wire.PageEvent{})),
	wire.EventTypeEV_READAHEAD:     int(unsafe.Sizeof(wire.RaEvent{})),
	wire.EventTypeEV_BLOCK:         int(unsafe.Sizeof(wire.BlockEvent{})),
	wire.EventTypeEV_DECODE_BEGIN:  int(unsafe.Sizeof(wire.DecodeEvent{})),
	wire.EventTypeEV_DECODE_END:    int(unsafe.Sizeof(wire.DecodeEvent{})),
	wire.EventTypeEV_GRAPH:         int(unsafe.Sizeof(wire.GraphEvent{})),
	wire.EventTypeEV_NODE:          int(unsafe.Sizeof(wire.NodeEvent{})),
	wire.EventTypeEV_OP:            int(unsafe.Sizeof(wire.OpEvent{})),
	wire.EventTypeEV_EXPERTS:       int(unsafe.Sizeof(wire.ExpertsEvent{})),
	wire.EventTypeEV_TASK:          int(unsafe.Sizeof(wire.TaskEvent{})),
	wire.EventTypeEV_MMAP:          int(unsafe.Sizeof(wire.MmapEvent{})),
	wire.EventTypeEV_MUNMAP:        int(unsafe.Sizeof(wire.MunmapEvent{})),
	wire.EventTypeEV_SCHED:         int(unsafe.Sizeof(wire.SchedEvent{})),
	wire.EventTypeEV_READ:          int(unsafe.Sizeof(wire.ReadEvent{})),
	wire.EventTypeEV_PLACE:         int(unsafe.Sizeof(wire.PlaceEvent{})),
	wire.EventTypeEV_BUFNAME:       int(unsafe.Sizeof(wire.BufnameEvent{})),
	wire.EventTypeEV_GRAPH_END:     int(unsafe.Sizeof(wire.GraphEndEvent{})),
	// A run's record ends after the bitmap words it needs: this is the
	// least, and runSize checks the rest.
	wire.EventTypeEV_PAGE_RUN: int(unsafe.Offsetof(wire.PageRunEvent{}.Pages)),
}

// EventSize is the size of the struct of event type t, 0 for an unknown t.
func EventSize(t uint16) int {
	if int(t) >= len(eventSizes) {
		return 0
	}
	return eventSizes[t]
}

// DecodeStats counts records by outcome. Damaged records are counted, not
// fatal: a run that lost a few records still says everything else.
type DecodeStats struct {
	ByType  [wire.EventTypeCount]uint64 // good records per event type
	Short   uint64                      // shorter than their type's struct (or than a header)
	Unknown uint64                      // hdr.type not an event type
}

// Total is the number of good records.
func (s *DecodeStats) Total() uint64 {
	var n uint64
	for _, c := range s.ByType {
		n += c
	}
	return n
}

// Record is one decoded spool record: its header and its type. The typed
// accessors return the event struct overlaying the record's bytes, so a
// Record is valid only as long as the bytes it was decoded from.
type Record struct {
	Hdr  *wire.EventHdr
	Type uint16
	raw  []byte
}

// Decode checks rec and returns it as a Record. It is false for records
// too short for their type's struct and for unknown types; both are
// counted in st. It does not allocate.
func Decode(rec []byte, st *DecodeStats) (Record, bool) {
	if len(rec) < hdrSize {
		st.Short++
		return Record{}, false
	}
	t := RecordType(rec)
	size := EventSize(t)
	if size == 0 {
		st.Unknown++
		return Record{}, false
	}
	if len(rec) < size || t == uint16(wire.EventTypeEV_PAGE_RUN) && !runSize(len(rec)) {
		st.Short++
		return Record{}, false
	}
	st.ByType[t]++
	return Record{Hdr: (*wire.EventHdr)(unsafe.Pointer(&rec[0])), Type: t, raw: rec}, true
}

// cast overlays T on the record. Decode has checked the length for the
// record's own type; the accessors below check the type, so a caller can
// never overlay a struct longer than the bytes.
func cast[T any](r Record) *T { return (*T)(unsafe.Pointer(&r.raw[0])) }

func (r Record) is(t wire.EventType) bool { return r.raw != nil && r.Type == uint16(t) }

// Fault is the record as a fault event, nil for another type.
func (r Record) Fault() *wire.FaultEvent {
	if !r.is(wire.EventTypeEV_FAULT) {
		return nil
	}
	return cast[wire.FaultEvent](r)
}

// FaultCount is the record as a count of faults outside the model
// files, nil for another type.
func (r Record) FaultCount() *wire.FaultCountEvent {
	if !r.is(wire.EventTypeEV_FAULT_COUNT) {
		return nil
	}
	return cast[wire.FaultCountEvent](r)
}

// Page is the record as a page event (EV_PAGE_ADD, EV_PAGE_DEL,
// EV_FILEMAP_FAULT), nil for another type.
func (r Record) Page() *wire.PageEvent {
	if !r.is(wire.EventTypeEV_PAGE_ADD) && !r.is(wire.EventTypeEV_PAGE_DEL) && !r.is(wire.EventTypeEV_FILEMAP_FAULT) {
		return nil
	}
	return cast[wire.PageEvent](r)
}

// runSize says whether n bytes are a page run's fixed part and whole
// bitmap words, at most all of them.
func runSize(n int) bool {
	fixed := eventSizes[wire.EventTypeEV_PAGE_RUN]
	return n >= fixed && n <= int(unsafe.Sizeof(wire.PageRunEvent{})) && (n-fixed)%8 == 0
}

// PageRun is the record as a run of page-cache adds or deletions, nil for
// another type. It is a copy, not an overlay: the record ends after the
// bitmap words the run needs, and the words it leaves out are zero.
func (r Record) PageRun() *wire.PageRunEvent {
	if !r.is(wire.EventTypeEV_PAGE_RUN) {
		return nil
	}
	var e wire.PageRunEvent
	copy(Bytes(&e), r.raw)
	return &e
}

// Block is the record as a block event, nil for another type.
func (r Record) Block() *wire.BlockEvent {
	if !r.is(wire.EventTypeEV_BLOCK) {
		return nil
	}
	return cast[wire.BlockEvent](r)
}

// Decode is the record as a decode event (begin or end), nil otherwise.
func (r Record) Decode() *wire.DecodeEvent {
	if !r.is(wire.EventTypeEV_DECODE_BEGIN) && !r.is(wire.EventTypeEV_DECODE_END) {
		return nil
	}
	return cast[wire.DecodeEvent](r)
}

// Graph is the record as a graph event, nil for another type.
func (r Record) Graph() *wire.GraphEvent {
	if !r.is(wire.EventTypeEV_GRAPH) {
		return nil
	}
	return cast[wire.GraphEvent](r)
}

// Node is the record as a node event, nil for another type.
func (r Record) Node() *wire.NodeEvent {
	if !r.is(wire.EventTypeEV_NODE) {
		return nil
	}
	return cast[wire.NodeEvent](r)
}

// Op is the record as an op event, nil for another type.
func (r Record) Op() *wire.OpEvent {
	if !r.is(wire.EventTypeEV_OP) {
		return nil
	}
	return cast[wire.OpEvent](r)
}

// Read is the record as a read event, nil for another type.
func (r Record) Read() *wire.ReadEvent {
	if !r.is(wire.EventTypeEV_READ) {
		return nil
	}
	return cast[wire.ReadEvent](r)
}

// Sched is the record as a scheduler event, nil for another type.
func (r Record) Sched() *wire.SchedEvent {
	if !r.is(wire.EventTypeEV_SCHED) {
		return nil
	}
	return cast[wire.SchedEvent](r)
}

// Experts is the record as an experts event, nil for another type.
func (r Record) Experts() *wire.ExpertsEvent {
	if !r.is(wire.EventTypeEV_EXPERTS) {
		return nil
	}
	return cast[wire.ExpertsEvent](r)
}

// Place is the record as a placement event, nil for another type.
func (r Record) Place() *wire.PlaceEvent {
	if !r.is(wire.EventTypeEV_PLACE) {
		return nil
	}
	return cast[wire.PlaceEvent](r)
}

// GraphEnd is the record as a graph-end event, nil for another type.
func (r Record) GraphEnd() *wire.GraphEndEvent {
	if !r.is(wire.EventTypeEV_GRAPH_END) {
		return nil
	}
	return cast[wire.GraphEndEvent](r)
}

// BufName is the record as a buffer-name event, nil for another type.
func (r Record) BufName() *wire.BufnameEvent {
	if !r.is(wire.EventTypeEV_BUFNAME) {
		return nil
	}
	return cast[wire.BufnameEvent](r)
}

// Readahead is the record as a readahead event, nil for another type.
func (r Record) Readahead() *wire.RaEvent {
	if !r.is(wire.EventTypeEV_READAHEAD) {
		return nil
	}
	return cast[wire.RaEvent](r)
}

// Task is the record as a task event, nil for another type.
func (r Record) Task() *wire.TaskEvent {
	if !r.is(wire.EventTypeEV_TASK) {
		return nil
	}
	return cast[wire.TaskEvent](r)
}

// Mmap is the record as an mmap event, nil for another type.
func (r Record) Mmap() *wire.MmapEvent {
	if !r.is(wire.EventTypeEV_MMAP) {
		return nil
	}
	return cast[wire.MmapEvent](r)
}

// Munmap is the record as a munmap event, nil for another type.
func (r Record) Munmap() *wire.MunmapEvent {
	if !r.is(wire.EventTypeEV_MUNMAP) {
		return nil
	}
	return cast[wire.MunmapEvent](r)
}

// Bytes returns the raw bytes of an event struct, as the BPF program
// would have put it in the ring buffer: what tests and synthetic spools
// write with SpoolWriter.Write. The result aliases *ev.
func Bytes[T any](ev *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(ev)), unsafe.Sizeof(*ev))
}
