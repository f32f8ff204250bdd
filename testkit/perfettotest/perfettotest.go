// Package perfettotest decodes iocorr's Perfetto traces for the tests,
// without their generated types (package perfetto writes the trace by
// hand, so its tests must not read it with its own code), by the
// published field numbers, failing on any field the exporter does not
// mean to write.
package perfettotest

import (
	"strconv"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/iocorr/iocorr/internal/protowalk"
)

// Event and Track are what the test's own decoder reads back,
// field by field, from the published field numbers.
type Event struct {
	TS, Track, Type  uint64
	Name             string
	Counter          int64
	Flows, TermFlows []uint64
	// Anns are the debug annotations by name: a string's value, an
	// integer's in decimal, "float" for a double.
	Anns map[string]string
}

type Track struct {
	UUID, Parent uint64
	// Name is the descriptor's, or its thread's (ThreadDescriptor's
	// thread_name).
	Name    string
	Thread  bool
	TID     uint32
	Counter bool
}

type Trace struct {
	Tracks map[uint64]Track // by uuid
	Events []Event          // in file order
}

// fields walks one message, failing on a malformed field.
func fields(t testing.TB, b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, u uint64)) {
	t.Helper()
	if err := protowalk.Fields(b, fn); err != nil {
		t.Fatal(err)
	}
}

// Decode reads a trace with a schema of its own: every packet on
// sequence 1 is a track descriptor or a timestamped track event, every
// field one the exporter means to write. Event names, categories,
// annotation names and string values are interned: an id must be defined
// by the InternedData of its packet or an earlier one, once, on a packet
// that says it needs the sequence's incremental state.
func Decode(t testing.TB, raw []byte) Trace {
	t.Helper()
	d := Trace{Tracks: map[uint64]Track{}}
	// Interned strings by InternedData field (1 categories, 2 event names,
	// 3 annotation names, 29 annotation string values), then iid.
	interned := map[protowire.Number]map[uint64]string{1: {}, 2: {}, 3: {}, 29: {}}
	lookup := func(table protowire.Number, iid uint64) string {
		s, ok := interned[table][iid]
		if !ok {
			t.Fatalf("interned id %d of table %d used before its InternedData", iid, table)
		}
		return s
	}
	fields(t, raw, func(num protowire.Number, _ protowire.Type, packet []byte, _ uint64) {
		if num != 1 {
			t.Fatalf("Trace field %d, want only packets (1)", num)
		}
		var ts, seq, flags uint64
		var hasTS bool
		var ev *Event
		// InternedData comes before the event that uses it (the exporter
		// writes it so); a decoder must not depend on that, so the event
		// is decoded after the packet's fields are read.
		var evBytes []byte
		fields(t, packet, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
			switch num {
			case 8:
				ts, hasTS = u, true
			case 10:
				seq = u
			case 13: // sequence_flags
				flags = u
			case 12: // interned_data
				fields(t, v, func(table protowire.Number, _ protowire.Type, v []byte, _ uint64) {
					if interned[table] == nil {
						t.Fatalf("InternedData field %d", table)
					}
					var iid uint64
					var str string
					fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
						switch num {
						case 1:
							iid = u
						case 2:
							str = string(v)
						default:
							t.Fatalf("interned entry field %d", num)
						}
					})
					if _, dup := interned[table][iid]; dup || iid == 0 {
						t.Fatalf("interned id %d of table %d defined twice or zero", iid, table)
					}
					interned[table][iid] = str
				})
			case 60:
				var tr Track
				fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
					switch num {
					case 1:
						tr.UUID = u
					case 2:
						tr.Name = string(v)
					case 3:
					case 4:
						tr.Thread = true
						fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
							switch num {
							case 2:
								tr.TID = uint32(u)
							case 5:
								tr.Name = string(v)
							}
						})
					case 5:
						tr.Parent = u
					case 8:
						tr.Counter = true
					default:
						t.Fatalf("TrackDescriptor field %d", num)
					}
				})
				if _, dup := d.Tracks[tr.UUID]; dup || tr.UUID == 0 {
					t.Fatalf("track uuid %d reused or zero", tr.UUID)
				}
				d.Tracks[tr.UUID] = tr
			case 11:
				evBytes = v
			default:
				t.Fatalf("TracePacket field %d", num)
			}
		})
		if evBytes != nil {
			if flags&2 == 0 {
				t.Fatalf("a track event packet without SEQ_NEEDS_INCREMENTAL_STATE (flags %d)", flags)
			}
			ev = &Event{Anns: map[string]string{}}
			fields(t, evBytes, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
				switch num {
				case 9:
					ev.Type = u
				case 11:
					ev.Track = u
				case 3:
					lookup(1, u)
				case 10:
					ev.Name = lookup(2, u)
				case 30:
					ev.Counter = int64(u)
				case 47:
					ev.Flows = append(ev.Flows, u)
				case 48:
					ev.TermFlows = append(ev.TermFlows, u)
				case 4:
					var name, val string
					fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
						switch num {
						case 1:
							name = lookup(3, u)
						case 17:
							val = lookup(29, u)
						case 3, 4:
							val = strconv.FormatInt(int64(u), 10)
						case 5:
							val = "float"
						default:
							t.Fatalf("DebugAnnotation field %d", num)
						}
					})
					ev.Anns[name] = val
				default:
					t.Fatalf("TrackEvent field %d", num)
				}
			})
		}
		if seq != 1 {
			t.Fatalf("packet on sequence %d", seq)
		}
		if ev != nil {
			if !hasTS {
				t.Fatal("a track event without a timestamp")
			}
			ev.TS = ts
			d.Events = append(d.Events, *ev)
		}
	})
	return d
}

// SlicesOn are the names of the slices begun on tracks named track, in
// the order the trace has them (time order).
func (d Trace) SlicesOn(track string) []string {
	var names []string
	for _, e := range d.Events {
		if d.Tracks[e.Track].Name == track && e.Type == 1 {
			names = append(names, e.Name)
		}
	}
	return names
}
