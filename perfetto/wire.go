package perfetto

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the messages a trace uses, from Perfetto's published
// trace format (protos/perfetto/trace: trace.proto, trace_packet.proto,
// track_event/track_descriptor.proto, track_event.proto,
// debug_annotation.proto, counter_descriptor.proto, process_descriptor.proto,
// thread_descriptor.proto). Only the fields iocorr writes are listed.
const (
	fTracePacket = 1 // Trace.packet

	fPacketTimestamp       = 8  // TracePacket.timestamp
	fPacketSequenceID      = 10 // TracePacket.trusted_packet_sequence_id
	fPacketTrackEvent      = 11 // TracePacket.track_event
	fPacketInternedData    = 12 // TracePacket.interned_data
	fPacketSequenceFlags   = 13 // TracePacket.sequence_flags
	fPacketTrackDescriptor = 60 // TracePacket.track_descriptor

	fTrackUUID    = 1 // TrackDescriptor.uuid
	fTrackName    = 2 // TrackDescriptor.name
	fTrackProcess = 3 // TrackDescriptor.process
	fTrackThread  = 4 // TrackDescriptor.thread
	fTrackParent  = 5 // TrackDescriptor.parent_uuid
	fTrackCounter = 8 // TrackDescriptor.counter

	fProcessPID  = 1 // ProcessDescriptor.pid
	fProcessName = 6 // ProcessDescriptor.process_name

	fThreadPID  = 1 // ThreadDescriptor.pid
	fThreadTID  = 2 // ThreadDescriptor.tid
	fThreadName = 5 // ThreadDescriptor.thread_name

	fCounterUnit     = 3 // CounterDescriptor.unit
	fCounterUnitName = 6 // CounterDescriptor.unit_name

	fEventCategoryIIDs = 3  // TrackEvent.category_iids
	fEventAnnotations  = 4  // TrackEvent.debug_annotations
	fEventType         = 9  // TrackEvent.type
	fEventNameIID      = 10 // TrackEvent.name_iid
	fEventTrackUUID    = 11 // TrackEvent.track_uuid
	fEventCounterValue = 30 // TrackEvent.counter_value
	fEventFlowIDs      = 47 // TrackEvent.flow_ids (fixed64)
	fEventTermFlowIDs  = 48 // TrackEvent.terminating_flow_ids (fixed64)

	fAnnNameIID      = 1  // DebugAnnotation.name_iid
	fAnnUint         = 3  // DebugAnnotation.uint_value
	fAnnInt          = 4  // DebugAnnotation.int_value
	fAnnString       = 6  // DebugAnnotation.string_value
	fAnnStringValIID = 17 // DebugAnnotation.string_value_iid

	// InternedData (interned_data/interned_data.proto): each entry is an
	// iid (1) and its string (2) — EventCategory, EventName,
	// DebugAnnotationName, InternedString.
	fInternCategories = 1  // InternedData.event_categories
	fInternNames      = 2  // InternedData.event_names
	fInternAnnNames   = 3  // InternedData.debug_annotation_names
	fInternAnnStrings = 29 // InternedData.debug_annotation_string_values
	fInternedIID      = 1
	fInternedString   = 2
)

// TrackEvent.Type values.
const (
	typeSliceBegin = 1
	typeSliceEnd   = 2
	typeInstant    = 3
	typeCounter    = 4
)

// CounterDescriptor.Unit values.
const (
	unitCount = 2
	unitBytes = 3
)

// TracePacket.SequenceFlags: SEQ_INCREMENTAL_STATE_CLEARED, set on the
// sequence's first packet, and SEQ_NEEDS_INCREMENTAL_STATE, on every
// packet whose event names interned strings.
const (
	sequenceIncrementalStateCleared = 1
	sequenceNeedsIncrementalState   = 2
)

// The one packet sequence of an exported trace.
const sequenceID = 1

// annotation is one debug annotation of an event: exactly one of its
// values is meaningful, chosen by kind.
type annotation struct {
	name string
	kind byte // 'u', 'i', 's'
	u    uint64
	i    int64
	s    string
}

func annU(name string, v uint64) annotation { return annotation{name: name, kind: 'u', u: v} }
func annI(name string, v int64) annotation  { return annotation{name: name, kind: 'i', i: v} }
func annS(name, v string) annotation        { return annotation{name: name, kind: 's', s: v} }

func appendAnnotation(b []byte, a annotation, in *interner) []byte {
	var m []byte
	m = protowire.AppendTag(m, fAnnNameIID, protowire.VarintType)
	m = protowire.AppendVarint(m, in.iid(annNames, a.name))
	switch a.kind {
	case 'u':
		m = protowire.AppendTag(m, fAnnUint, protowire.VarintType)
		m = protowire.AppendVarint(m, a.u)
	case 'i':
		m = protowire.AppendTag(m, fAnnInt, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(a.i))
	default:
		m = protowire.AppendTag(m, fAnnStringValIID, protowire.VarintType)
		m = protowire.AppendVarint(m, in.iid(annStrings, a.s))
	}
	b = protowire.AppendTag(b, fEventAnnotations, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// The interned string tables of a trace's one sequence.
const (
	categories = iota
	eventNames
	annNames
	annStrings
	internTables
)

// internField is each table's InternedData field.
var internField = [internTables]protowire.Number{fInternCategories, fInternNames, fInternAnnNames, fInternAnnStrings}

// interner gives each string of a table (event names, categories,
// annotation names and string values) an id the first time a packet
// uses it, and collects the new ones for that packet's InternedData: a
// string is written once per trace, then referred to by a varint. The
// tables hold the distinct strings (names of tensors, ops, tokens), not
// the events.
type interner struct {
	ids   [internTables]map[string]uint64
	fresh [internTables][]string
}

func newInterner() *interner {
	in := &interner{}
	for i := range in.ids {
		in.ids[i] = map[string]uint64{}
	}
	return in
}

func (in *interner) iid(table int, s string) uint64 {
	if id, ok := in.ids[table][s]; ok {
		return id
	}
	id := uint64(len(in.ids[table]) + 1) // iids start at 1: 0 means unset
	in.ids[table][s] = id
	in.fresh[table] = append(in.fresh[table], s)
	return id
}

// appendFresh appends the InternedData of the strings given ids since the
// last call, if any, and forgets them.
func (in *interner) appendFresh(p []byte) []byte {
	var d []byte
	for t := range in.fresh {
		for _, s := range in.fresh[t] {
			var e []byte
			e = protowire.AppendTag(e, fInternedIID, protowire.VarintType)
			e = protowire.AppendVarint(e, in.ids[t][s])
			e = protowire.AppendTag(e, fInternedString, protowire.BytesType)
			e = protowire.AppendString(e, s)
			d = protowire.AppendTag(d, internField[t], protowire.BytesType)
			d = protowire.AppendBytes(d, e)
		}
		in.fresh[t] = in.fresh[t][:0]
	}
	if d == nil {
		return p
	}
	p = protowire.AppendTag(p, fPacketInternedData, protowire.BytesType)
	return protowire.AppendBytes(p, d)
}

// trackEvent is one TrackEvent to write at ts.
type trackEvent struct {
	ts       uint64
	track    uint64
	typ      uint64
	name     string
	category string
	counter  int64
	anns     []annotation
	flows    []uint64 // flow ids this event starts or continues
	endFlows []uint64 // flow ids this event terminates
}

// marshal is e's TracePacket, its names interned in in (with the
// InternedData of the strings it is first to use).
func (e *trackEvent) marshal(in *interner) []byte {
	var te []byte
	te = protowire.AppendTag(te, fEventType, protowire.VarintType)
	te = protowire.AppendVarint(te, e.typ)
	te = protowire.AppendTag(te, fEventTrackUUID, protowire.VarintType)
	te = protowire.AppendVarint(te, e.track)
	if e.category != "" {
		te = protowire.AppendTag(te, fEventCategoryIIDs, protowire.VarintType)
		te = protowire.AppendVarint(te, in.iid(categories, e.category))
	}
	if e.name != "" {
		te = protowire.AppendTag(te, fEventNameIID, protowire.VarintType)
		te = protowire.AppendVarint(te, in.iid(eventNames, e.name))
	}
	if e.typ == typeCounter {
		te = protowire.AppendTag(te, fEventCounterValue, protowire.VarintType)
		te = protowire.AppendVarint(te, uint64(e.counter))
	}
	for _, a := range e.anns {
		te = appendAnnotation(te, a, in)
	}
	for _, id := range e.flows {
		te = protowire.AppendTag(te, fEventFlowIDs, protowire.Fixed64Type)
		te = protowire.AppendFixed64(te, id)
	}
	for _, id := range e.endFlows {
		te = protowire.AppendTag(te, fEventTermFlowIDs, protowire.Fixed64Type)
		te = protowire.AppendFixed64(te, id)
	}
	var p []byte
	p = protowire.AppendTag(p, fPacketTimestamp, protowire.VarintType)
	p = protowire.AppendVarint(p, e.ts)
	p = protowire.AppendTag(p, fPacketSequenceID, protowire.VarintType)
	p = protowire.AppendVarint(p, sequenceID)
	p = protowire.AppendTag(p, fPacketSequenceFlags, protowire.VarintType)
	p = protowire.AppendVarint(p, sequenceNeedsIncrementalState)
	p = in.appendFresh(p)
	p = protowire.AppendTag(p, fPacketTrackEvent, protowire.BytesType)
	return protowire.AppendBytes(p, te)
}

// track is one TrackDescriptor.
type track struct {
	uuid, parent uint64
	name         string
	pid, tid     int32 // a process track has pid; a thread track both
	thread       bool
	counterUnit  uint64 // non-zero for a counter track
	unitName     string
}

func (t *track) marshal(first bool) []byte {
	var d []byte
	d = protowire.AppendTag(d, fTrackUUID, protowire.VarintType)
	d = protowire.AppendVarint(d, t.uuid)
	if t.parent != 0 {
		d = protowire.AppendTag(d, fTrackParent, protowire.VarintType)
		d = protowire.AppendVarint(d, t.parent)
	}
	switch {
	case t.thread:
		d = appendOwner(d, fTrackThread, fThreadName, t.name, idField{fThreadPID, uint64(t.pid)}, idField{fThreadTID, uint64(t.tid)})
	case t.pid != 0:
		d = appendOwner(d, fTrackProcess, fProcessName, t.name, idField{fProcessPID, uint64(t.pid)})
	default:
		d = protowire.AppendTag(d, fTrackName, protowire.BytesType)
		d = protowire.AppendString(d, t.name)
	}
	if t.counterUnit != 0 {
		var c []byte
		c = protowire.AppendTag(c, fCounterUnit, protowire.VarintType)
		c = protowire.AppendVarint(c, t.counterUnit)
		if t.unitName != "" {
			c = protowire.AppendTag(c, fCounterUnitName, protowire.BytesType)
			c = protowire.AppendString(c, t.unitName)
		}
		d = protowire.AppendTag(d, fTrackCounter, protowire.BytesType)
		d = protowire.AppendBytes(d, c)
	}
	var p []byte
	p = protowire.AppendTag(p, fPacketSequenceID, protowire.VarintType)
	p = protowire.AppendVarint(p, sequenceID)
	if first {
		p = protowire.AppendTag(p, fPacketSequenceFlags, protowire.VarintType)
		p = protowire.AppendVarint(p, sequenceIncrementalStateCleared)
	}
	p = protowire.AppendTag(p, fPacketTrackDescriptor, protowire.BytesType)
	return protowire.AppendBytes(p, d)
}

// appendPacket frames one TracePacket as a Trace.packet field: a trace
// file is the concatenation of these.
// idField is a varint field of a descriptor: its number and value.
type idField struct {
	num protowire.Number
	v   uint64
}

// appendOwner appends, as field num, the descriptor of a track's thread
// or process: its ids, then its name (field nameField) where it has one.
func appendOwner(d []byte, num, nameField protowire.Number, name string, ids ...idField) []byte {
	var m []byte
	for _, id := range ids {
		m = protowire.AppendTag(m, id.num, protowire.VarintType)
		m = protowire.AppendVarint(m, id.v)
	}
	if name != "" {
		m = protowire.AppendTag(m, nameField, protowire.BytesType)
		m = protowire.AppendString(m, name)
	}
	d = protowire.AppendTag(d, num, protowire.BytesType)
	return protowire.AppendBytes(d, m)
}

func appendPacket(b, packet []byte) []byte {
	b = protowire.AppendTag(b, fTracePacket, protowire.BytesType)
	return protowire.AppendBytes(b, packet)
}
