package rundir

import "github.com/iocorr/iocorr/gguf"

// TensorsOf is the tensor table of a model file as meta.json records it.
func TensorsOf(f *gguf.File) []Tensor {
	out := make([]Tensor, 0, len(f.Tensors))
	for _, t := range f.Tensors {
		shape := make([]uint64, len(t.Dims))
		for i, d := range t.Dims {
			shape[i] = uint64(d)
		}
		out = append(out, Tensor{
			Name: t.Name, Type: t.Type.String(), Shape: shape, Offset: t.FileOffset, Size: t.Size,
			Layer: t.Layer, Role: t.Role, Experts: t.Experts, ExpertStride: t.ExpertSize,
		})
	}
	return out
}
