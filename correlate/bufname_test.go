package correlate

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/wire"
)

func bufName(ts, buffer uint64, name string) []byte {
	e := wire.BufnameEvent{Hdr: hdr(wire.EventTypeEV_BUFNAME, ts, 1, 0), Buffer: buffer}
	for i := range len(name) {
		e.Name[i] = int8(name[i])
	}
	return ingest.Bytes(&e)
}

func placeRec(ts, buffer uint64, tensor string) []byte {
	e := wire.PlaceEvent{Hdr: hdr(wire.EventTypeEV_PLACE, ts, 1, 0), Buffer: buffer}
	for i := range len(tensor) {
		e.Name[i] = int8(tensor[i])
	}
	return ingest.Bytes(&e)
}

// TestAWeightsDeviceIsItsBuffersNameAndAnEmptyNameIsAnUnnamedBuffer: a
// buffer named before or after its weight is copied in names the weight's
// device; the recorder's empty name (a name it could not read at the end)
// makes the device event.DeviceUnnamed, and never hides a name read
// before; a weight of no buffer seen has none.
func TestAWeightsDeviceIsItsBuffersNameAndAnEmptyNameIsAnUnnamedBuffer(t *testing.T) {
	tests := []struct {
		name string
		recs [][]byte
		want [3]string // devices of attn_q, ffn_up_exps, output
	}{
		{"named before the copy", [][]byte{bufName(1, 0xa, "Vulkan0"), placeRec(2, 0xa, "blk.0.attn_q.weight")}, [3]string{"Vulkan0", "", ""}},
		{"named after the copy", [][]byte{placeRec(1, 0xa, "blk.0.attn_q.weight"), bufName(2, 0xa, "Vulkan0")}, [3]string{"Vulkan0", "", ""}},
		{"unnamed at the end", [][]byte{placeRec(1, 0xa, "blk.0.attn_q.weight"), placeRec(2, 0xb, "output.weight"), bufName(3, 0xb, "CPU"), bufName(9, 0xa, "")},
			[3]string{event.DeviceUnnamed, "", "CPU"}},
		{"an empty name hides no name read before", [][]byte{bufName(1, 0xa, "Vulkan0"), placeRec(2, 0xa, "blk.0.attn_q.weight"), bufName(9, 0xa, "")},
			[3]string{"Vulkan0", "", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, _ := run(t, tc.recs...)
			for i, id := range []uint32{idQ, idExps, idOut} {
				if got := res.Tensors[id].Device; got != tc.want[i] {
					t.Errorf("%s: device %q, want %q", res.Tensors[id].Name, got, tc.want[i])
				}
			}
		})
	}
}
