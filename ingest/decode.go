package ingest

import (
	"encoding/binary"
	"unsafe"

	"github.com/iocorr/iocorr/bpf"
)

// A spool record is a BPF event verbatim: the C struct from bpf/iocorr.h,
// byte for byte, starting with struct event_hdr. Decoding is therefore a
// length check and a pointer cast onto the generated bpf2go type, never a
// field-by-field copy into a hand-kept Go twin that could drift from the C
// header. The structs have no implicit padding (iocorr.h guarantees it) and
// the target is little endian, as the BPF programs are.

// hdrSize is the size of struct event_hdr; typeOff is where hdr.type sits.
const (
	hdrSize = int(unsafe.Sizeof(bpf.IocorrEventHdr{}))
	typeOff = int(unsafe.Offsetof(bpf.IocorrEventHdr{}.Type))
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
var eventSizes = [bpf.EventTypeCount]int{
	bpf.IocorrEventTypeEV_FAULT:         int(unsafe.Sizeof(bpf.IocorrFaultEvent{})),
	bpf.IocorrEventTypeEV_FILEMAP_FAULT: int(unsafe.Sizeof(bpf.IocorrPageEvent{})),
	bpf.IocorrEventTypeEV_PAGE_ADD:      int(unsafe.Sizeof(bpf.IocorrPageEvent{})),
	bpf.IocorrEventTypeEV_PAGE_DEL:      int(unsafe.Sizeof(bpf.IocorrPageEvent{})),
	bpf.IocorrEventTypeEV_READAHEAD:     int(unsafe.Sizeof(bpf.IocorrRaEvent{})),
	bpf.IocorrEventTypeEV_BLOCK:         int(unsafe.Sizeof(bpf.IocorrBlockEvent{})),
	bpf.IocorrEventTypeEV_DECODE_BEGIN:  int(unsafe.Sizeof(bpf.IocorrDecodeEvent{})),
	bpf.IocorrEventTypeEV_DECODE_END:    int(unsafe.Sizeof(bpf.IocorrDecodeEvent{})),
	bpf.IocorrEventTypeEV_GRAPH:         int(unsafe.Sizeof(bpf.IocorrGraphEvent{})),
	bpf.IocorrEventTypeEV_NODE:          int(unsafe.Sizeof(bpf.IocorrNodeEvent{})),
	bpf.IocorrEventTypeEV_OP:            int(unsafe.Sizeof(bpf.IocorrOpEvent{})),
	bpf.IocorrEventTypeEV_EXPERTS:       int(unsafe.Sizeof(bpf.IocorrExpertsEvent{})),
	bpf.IocorrEventTypeEV_TASK:          int(unsafe.Sizeof(bpf.IocorrTaskEvent{})),
	bpf.IocorrEventTypeEV_MMAP:          int(unsafe.Sizeof(bpf.IocorrMmapEvent{})),
	bpf.IocorrEventTypeEV_SCHED:         int(unsafe.Sizeof(bpf.IocorrSchedEvent{})),
	bpf.IocorrEventTypeEV_READ:          int(unsafe.Sizeof(bpf.IocorrReadEvent{})),
	bpf.IocorrEventTypeEV_PLACE:         int(unsafe.Sizeof(bpf.IocorrPlaceEvent{})),
	bpf.IocorrEventTypeEV_BUFNAME:       int(unsafe.Sizeof(bpf.IocorrBufnameEvent{})),
	// A run's record ends after the bitmap words it needs: this is the
	// least, and runSize checks the rest.
	bpf.IocorrEventTypeEV_PAGE_RUN: int(unsafe.Offsetof(bpf.IocorrPageRunEvent{}.Pages)),
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
	ByType  [bpf.EventTypeCount]uint64 // good records per event type
	Short   uint64                     // shorter than their type's struct (or than a header)
	Unknown uint64                     // hdr.type not an event type
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
	Hdr  *bpf.IocorrEventHdr
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
	if len(rec) < size || t == uint16(bpf.IocorrEventTypeEV_PAGE_RUN) && !runSize(len(rec)) {
		st.Short++
		return Record{}, false
	}
	st.ByType[t]++
	return Record{Hdr: (*bpf.IocorrEventHdr)(unsafe.Pointer(&rec[0])), Type: t, raw: rec}, true
}

// cast overlays T on the record. Decode has checked the length for the
// record's own type; the accessors below check the type, so a caller can
// never overlay a struct longer than the bytes.
func cast[T any](r Record) *T { return (*T)(unsafe.Pointer(&r.raw[0])) }

func (r Record) is(t bpf.IocorrEventType) bool { return r.raw != nil && r.Type == uint16(t) }

// Fault is the record as a fault event, nil for another type.
func (r Record) Fault() *bpf.IocorrFaultEvent {
	if !r.is(bpf.IocorrEventTypeEV_FAULT) {
		return nil
	}
	return cast[bpf.IocorrFaultEvent](r)
}

// Page is the record as a page event (EV_PAGE_ADD, EV_PAGE_DEL,
// EV_FILEMAP_FAULT), nil for another type.
func (r Record) Page() *bpf.IocorrPageEvent {
	if !r.is(bpf.IocorrEventTypeEV_PAGE_ADD) && !r.is(bpf.IocorrEventTypeEV_PAGE_DEL) && !r.is(bpf.IocorrEventTypeEV_FILEMAP_FAULT) {
		return nil
	}
	return cast[bpf.IocorrPageEvent](r)
}

// runSize says whether n bytes are a page run's fixed part and whole
// bitmap words, at most all of them.
func runSize(n int) bool {
	fixed := eventSizes[bpf.IocorrEventTypeEV_PAGE_RUN]
	return n >= fixed && n <= int(unsafe.Sizeof(bpf.IocorrPageRunEvent{})) && (n-fixed)%8 == 0
}

// PageRun is the record as a run of page-cache adds or deletions, nil for
// another type. It is a copy, not an overlay: the record ends after the
// bitmap words the run needs, and the words it leaves out are zero.
func (r Record) PageRun() *bpf.IocorrPageRunEvent {
	if !r.is(bpf.IocorrEventTypeEV_PAGE_RUN) {
		return nil
	}
	var e bpf.IocorrPageRunEvent
	copy(Bytes(&e), r.raw)
	return &e
}

// Block is the record as a block event, nil for another type.
func (r Record) Block() *bpf.IocorrBlockEvent {
	if !r.is(bpf.IocorrEventTypeEV_BLOCK) {
		return nil
	}
	return cast[bpf.IocorrBlockEvent](r)
}

// Decode is the record as a decode event (begin or end), nil otherwise.
func (r Record) Decode() *bpf.IocorrDecodeEvent {
	if !r.is(bpf.IocorrEventTypeEV_DECODE_BEGIN) && !r.is(bpf.IocorrEventTypeEV_DECODE_END) {
		return nil
	}
	return cast[bpf.IocorrDecodeEvent](r)
}

// Graph is the record as a graph event, nil for another type.
func (r Record) Graph() *bpf.IocorrGraphEvent {
	if !r.is(bpf.IocorrEventTypeEV_GRAPH) {
		return nil
	}
	return cast[bpf.IocorrGraphEvent](r)
}

// Node is the record as a node event, nil for another type.
func (r Record) Node() *bpf.IocorrNodeEvent {
	if !r.is(bpf.IocorrEventTypeEV_NODE) {
		return nil
	}
	return cast[bpf.IocorrNodeEvent](r)
}

// Op is the record as an op event, nil for another type.
func (r Record) Op() *bpf.IocorrOpEvent {
	if !r.is(bpf.IocorrEventTypeEV_OP) {
		return nil
	}
	return cast[bpf.IocorrOpEvent](r)
}

// Read is the record as a read event, nil for another type.
func (r Record) Read() *bpf.IocorrReadEvent {
	if !r.is(bpf.IocorrEventTypeEV_READ) {
		return nil
	}
	return cast[bpf.IocorrReadEvent](r)
}

// Sched is the record as a scheduler event, nil for another type.
func (r Record) Sched() *bpf.IocorrSchedEvent {
	if !r.is(bpf.IocorrEventTypeEV_SCHED) {
		return nil
	}
	return cast[bpf.IocorrSchedEvent](r)
}

// Experts is the record as an experts event, nil for another type.
func (r Record) Experts() *bpf.IocorrExpertsEvent {
	if !r.is(bpf.IocorrEventTypeEV_EXPERTS) {
		return nil
	}
	return cast[bpf.IocorrExpertsEvent](r)
}

// Place is the record as a placement event, nil for another type.
func (r Record) Place() *bpf.IocorrPlaceEvent {
	if !r.is(bpf.IocorrEventTypeEV_PLACE) {
		return nil
	}
	return cast[bpf.IocorrPlaceEvent](r)
}

// BufName is the record as a buffer-name event, nil for another type.
func (r Record) BufName() *bpf.IocorrBufnameEvent {
	if !r.is(bpf.IocorrEventTypeEV_BUFNAME) {
		return nil
	}
	return cast[bpf.IocorrBufnameEvent](r)
}

// Readahead is the record as a readahead event, nil for another type.
func (r Record) Readahead() *bpf.IocorrRaEvent {
	if !r.is(bpf.IocorrEventTypeEV_READAHEAD) {
		return nil
	}
	return cast[bpf.IocorrRaEvent](r)
}

// Task is the record as a task event, nil for another type.
func (r Record) Task() *bpf.IocorrTaskEvent {
	if !r.is(bpf.IocorrEventTypeEV_TASK) {
		return nil
	}
	return cast[bpf.IocorrTaskEvent](r)
}

// Mmap is the record as an mmap event, nil for another type.
func (r Record) Mmap() *bpf.IocorrMmapEvent {
	if !r.is(bpf.IocorrEventTypeEV_MMAP) {
		return nil
	}
	return cast[bpf.IocorrMmapEvent](r)
}

// Bytes returns the raw bytes of an event struct, as the BPF program
// would have put it in the ring buffer: what tests and synthetic spools
// write with SpoolWriter.Write. The result aliases *ev.
func Bytes[T any](ev *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(ev)), unsafe.Sizeof(*ev))
}
