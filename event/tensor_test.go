package event

import (
	"testing"
	"unsafe"
)

func TestFileOffsetIsTensorOffsetPlusEventOffsetForModelTensorsOnly(t *testing.T) {
	tensors := []Tensor{
		{ID: TensorOther, Model: -1},
		{ID: TensorAnon, Model: -1},
		{ID: TensorModelMeta, Model: -1},
		{ID: FirstTensor, Model: 1, Offset: 8192},
	}
	tests := []struct {
		name      string
		ev        Event
		wantModel int
		wantOff   int64
		wantOK    bool
	}{
		{"a model tensor's byte", Event{Tensor: FirstTensor, Offset: 100}, 1, 8292, true},
		{"another file", Event{Tensor: TensorOther, Offset: 100}, -1, 0, false},
		{"a model's header bytes", Event{Tensor: TensorModelMeta, Offset: 100}, -1, 0, false},
		{"an id past the dictionary", Event{Tensor: FirstTensor + 1}, -1, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, off, ok := FileOffset(tensors, &tc.ev)
			if m != tc.wantModel || off != tc.wantOff || ok != tc.wantOK {
				t.Errorf("FileOffset = %d, %d, %v; want %d, %d, %v", m, off, ok, tc.wantModel, tc.wantOff, tc.wantOK)
			}
		})
	}
}

// Every stored slice is decoded into an Event, and the correlator and
// the readers copy them by value: the request id must not grow it past
// one cache line (the ingest rate fell 5–10% when it did).
func TestEventFitsInOneCacheLine(t *testing.T) {
	if n := unsafe.Sizeof(Event{}); n > 64 {
		t.Errorf("Event is %d bytes, want at most 64", n)
	}
}
