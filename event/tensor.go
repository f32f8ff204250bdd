package event

import "strings"

// Pseudo tensor ids. Real tensors are numbered from FirstTensor in the
// order of the run metadata (model by model, header order).
const (
	TensorOther     uint32 = 0 // a file that is not a model
	TensorAnon      uint32 = 1 // anonymous memory
	TensorModelMeta uint32 = 2 // a model file's bytes outside every tensor
	FirstTensor     uint32 = 3
	// NoTensor marks "no trigger" in Event.Trigger.
	NoTensor uint32 = ^uint32(0)
)

// PseudoNames names the pseudo tensors by id.
var PseudoNames = [FirstTensor]string{"[other file]", "[anonymous]", "[model header]"}

// Tensor is a row of the tensor dictionary.
type Tensor struct {
	ID           uint32
	Name         string
	Model        int // index in Meta.Models, -1 for pseudo tensors
	Layer        int // -1 when not in a block
	Role         string
	Type         string
	Offset       int64 // absolute, in the model file
	Size         int64
	Experts      int
	ExpertStride int64
	// Op is the op id of the graph node that consumes the weight (EV_NODE),
	// 0 when no node was seen.
	Op uint32
	// NotFileBacked is set when a graph node read this weight from memory
	// that is not a file mapping.
	NotFileBacked bool
	// Device is the name of the backend buffer that holds the weight while
	// the run computes, as ggml names it ("CPU_Mapped": streamed from the
	// mapped file; "Vulkan0", "CUDA0", "CPU_REPACK": copied there while
	// loading); "" when no probe saw it (query names that DeviceUnknown),
	// DeviceUnnamed when its buffer's name could not be read.
	Device string `json:"device,omitempty"`
	// Copied is set when the loader copied the weight from the model's
	// mapping into its buffer (ggml_backend_tensor_set): its load-time
	// reads are the load's (token 0), not the tokens'.
	Copied bool `json:"copied,omitempty"`
}

// DeviceUnknown names the device of a weight no probe placed.
const DeviceUnknown = "[unknown]"

// DeviceUnnamed is the device of a weight whose buffer the probes saw
// but whose name they could not read: unreadable at every return of
// ggml_backend_buffer_name in its thread, and at the run's end in no file
// the process had mapped (a name on the heap, as a GPU backend's is).
const DeviceUnnamed = "[unnamed buffer]"

// DeviceNA is why a device name is no buffer's name ("" when it is one):
// a row of DeviceUnknown or DeviceUnnamed says where nothing was measured.
func DeviceNA(name string) string {
	switch name {
	case DeviceUnknown:
		return "no probe saw the buffer that held these weights (the recording had no buffer probe, or neither the loader's copy nor a graph node showed their buffer)"
	case DeviceUnnamed:
		return "their buffer's name was unreadable at each return of ggml_backend_buffer_name in its thread (its page not yet mapped) and, at the run's end, lay in no unwritable file mapping of the process (a name built on the heap, as a GPU backend's is)"
	}
	return ""
}

// DeviceName is t's device as outputs print it: DeviceUnknown for a weight
// no probe placed, "" for a pseudo tensor (no weight at all).
func (t *Tensor) DeviceName() string {
	switch {
	case t.Pseudo():
		return ""
	case t.Device == "":
		return DeviceUnknown
	}
	return t.Device
}

// OffCPU says whether t lived in a named buffer of no CPU backend (a
// GPU's): false where its buffer is unknown or its name unreadable, which
// proves no GPU.
func (t *Tensor) OffCPU() bool {
	return t.Device != "" && DeviceNA(t.Device) == "" && !strings.HasPrefix(t.Device, "CPU")
}

// Pseudo reports whether t is one of the bracketed catch-all tensors.
func (t *Tensor) Pseudo() bool { return t.ID < FirstTensor }

// FileOffset is where in its model file the first byte of e lies: e's
// offset is within its tensor, and the tensor's is absolute. ok is false for
// events on pseudo tensors (other files, anonymous memory, a model's
// header), whose offsets are no model byte, and for a tensor id outside
// tensors. It is the one event → file offset mapping of the read side.
func FileOffset(tensors []Tensor, e *Event) (model int, off int64, ok bool) {
	if int(e.Tensor) >= len(tensors) {
		return -1, 0, false
	}
	t := &tensors[e.Tensor]
	if t.Pseudo() || t.Model < 0 {
		return -1, 0, false
	}
	return t.Model, t.Offset + e.Offset, true
}
