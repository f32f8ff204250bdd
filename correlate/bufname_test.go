package correlate

import (
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

func bufName(ts, buffer uint64, name string) []byte {
	e := wire.BufnameEvent{Hdr: hdr(wire.EventTypeEV_BUFNAME, ts, 1, 0), Buffer: buffer}
	cstr(e.Name[:], name)
	return ingest.Bytes(&e)
}

func placeRec(ts, buffer uint64, tensor string) []byte {
	e := wire.PlaceEvent{Hdr: hdr(wire.EventTypeEV_PLACE, ts, 1, 0), Buffer: buffer}
	cstr(e.Name[:], tensor)
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

// nodeIn is a graph node named node reading weight from buffer, its data
// where the kernel found it (dev, ino: 0 for anonymous memory).
func nodeIn(node, weight string, buffer uint64, dev uint32, ino uint64) []byte {
	n := wire.NodeEvent{Hdr: hdr(wire.EventTypeEV_NODE, 1, 1, 1), Dev: dev, Ino: ino, Op: 2, WeightBuffer: buffer}
	cstr(n.NodeName[:], node)
	cstr(n.WeightName[:], weight)
	return ingest.Bytes(&n)
}

// TestAWeightInADriversMappingIsNotFileBackedAndNamedByItsBuffer: on a
// real GPU a weight llama.cpp keeps in the driver's host-visible memory
// (Vulkan_Host, CUDA_Host) has its data in a mapping of the driver's
// device file (/dev/nvidia0, a char device on devtmpfs) or a memfd: a
// file-backed mapping, yet not the model's, so the weight is not file
// backed and its device is its buffer's name; one in the model's own
// mapping is file-backed; a node that failed validation (meta.json's
// layout.nodes) gives its weight neither op nor device.
func TestAWeightInADriversMappingIsNotFileBackedAndNamedByItsBuffer(t *testing.T) {
	const devtmpfs, nvidia0 = 6, 142
	tests := []struct {
		name       string
		rec        []byte
		failed     bool
		wantDevice string
		wantFile   bool
		wantOp     bool
	}{
		{"in the model's mapping", nodeIn("Qcur-0", "blk.0.attn_q.weight", 0xa, modelDev, modelIno), false, "CPU_Mapped", true, true},
		{"in /dev/nvidia0's mapping", nodeIn("Qcur-0", "blk.0.attn_q.weight", 0xb, devtmpfs, nvidia0), false, "CUDA_Host", false, true},
		{"in a memfd", nodeIn("Qcur-0", "blk.0.attn_q.weight", 0xc, 1, 1042), false, "Vulkan_Host", false, true},
		{"in anonymous memory", nodeIn("Qcur-0", "blk.0.attn_q.weight", 0xc, 0, 0), false, "Vulkan_Host", false, true},
		{"a node that failed validation", nodeIn("Qcur-0", "blk.0.attn_q.weight", 0xb, devtmpfs, nvidia0), true, "", true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := testMeta()
			if tc.failed {
				m.Layout = &rundir.Layout{Nodes: &rundir.NodeFailures{Checked: 9, Failed: 1, Nodes: []rundir.NodeFailure{{Node: "Qcur-0", Weight: "blk.0.attn_q.weight"}}}}
			}
			res, _ := runMeta(t, m, bufName(1, 0xa, "CPU_Mapped"), bufName(1, 0xb, "CUDA_Host"), bufName(1, 0xc, "Vulkan_Host"), tc.rec)
			q := res.Tensors[idQ]
			if q.Device != tc.wantDevice || q.NotFileBacked == tc.wantFile || (q.Op != 0) != tc.wantOp {
				t.Fatalf("device %q, not file-backed %v, op %d; want %q, %v, op %v", q.Device, q.NotFileBacked, q.Op, tc.wantDevice, !tc.wantFile, tc.wantOp)
			}
		})
	}
}
