package event

import (
	"reflect"
	"testing"
	"unsafe"
)

// Every field of Counters has exactly one descriptor, and Values, SetValues
// and Add move each counter under its own name and no other.
func TestEveryCounterFieldHasOneDescriptorAndRoundTrips(t *testing.T) {
	if n := reflect.TypeFor[Counters]().NumField(); n != NumCounters {
		t.Fatalf("Counters has %d fields, CounterFields %d", n, NumCounters)
	}
	var probe Counters
	base := uintptr(unsafe.Pointer(&probe))
	seenField := map[uintptr]string{}
	seenName := map[string]bool{}
	for i, d := range CounterFields {
		t.Run(d.Name, func(t *testing.T) {
			off := uintptr(unsafe.Pointer(d.Field(&probe))) - base
			if other, dup := seenField[off]; dup {
				t.Fatalf("%s and %s are the same field", d.Name, other)
			}
			seenField[off] = d.Name
			if seenName[d.Name] || d.Name == "" || d.Meaning == "" || d.Unit == "" {
				t.Fatalf("descriptor %+v: names must be unique and everything said", d)
			}
			seenName[d.Name] = true
			if got, ok := CounterByName(d.Name); !ok || got.Name != d.Name {
				t.Errorf("CounterByName(%q) = %v, %v", d.Name, got, ok)
			}
			var c Counters
			*d.Field(&c) = 7
			v := c.Values()
			for j, x := range v {
				if want := map[bool]uint64{true: 7, false: 0}[j == i]; x != want {
					t.Errorf("Values()[%d] = %d, want %d", j, x, want)
				}
			}
			var back Counters
			back.SetValues(&v)
			if back != c {
				t.Errorf("SetValues(Values()) = %+v, want %+v", back, c)
			}
			back.Add(&c)
			if *d.Field(&back) != 14 || back.Values()[i] != 14 {
				t.Errorf("Add: %s = %d, want 14", d.Name, *d.Field(&back))
			}
		})
	}
}
