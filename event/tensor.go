package event

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
}

// Pseudo reports whether t is one of the bracketed catch-all tensors.
func (t *Tensor) Pseudo() bool { return t.ID < FirstTensor }
