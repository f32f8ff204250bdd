package gguf

import (
	"strconv"
	"strings"
)

// MaxDims is the most dimensions a ggml tensor has (GGML_MAX_DIMS).
const MaxDims = 4

// Tensor is one tensor info of a file plus where its bytes are.
type Tensor struct {
	Name string
	Type Type
	// Dims is ggml's ne: Dims[0] is the number of elements in a row (the
	// fastest-varying dimension), so attn_k is {n_embd, n_embd_k_gqa}.
	Dims []int64
	// Offset is the offset stored in the file, relative to the data
	// section.
	Offset int64
	// FileOffset is the absolute offset of the first byte in the file.
	FileOffset int64
	// Size is the number of data bytes, padding excluded.
	Size int64

	// Layer is N for "blk.N.*" tensors and -1 for the others
	// (token_embd, output_norm, output).
	Layer int
	// Role is the name without the layer prefix and the .weight/.bias
	// suffix: "attn_q", "ffn_up_exps", "token_embd", "output".
	Role string
	// Experts is the number of experts of a *_exps tensor (its last
	// dimension) and 0 for other tensors. Expert e's bytes are
	// [FileOffset+e*ExpertSize, FileOffset+(e+1)*ExpertSize).
	Experts    int
	ExpertSize int64

	// Path is the file the tensor lives in, Shard that file's index in
	// Model.Files, Index the tensor's position in that file's header.
	Path  string
	Shard int
	Index int
}

// End is the file offset just past the tensor's last byte.
func (t *Tensor) End() int64 { return t.FileOffset + t.Size }

// Elements is the number of elements.
func (t *Tensor) Elements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// Strides is ggml's nb: the byte distance between consecutive indices of
// each dimension, for a contiguous tensor. Unused dimensions have ne=1.
func (t *Tensor) Strides() [MaxDims]int64 {
	var nb [MaxDims]int64
	row, _ := t.Type.RowSize(t.dim(0))
	nb[0] = t.Type.TypeSize()
	nb[1] = row
	for i := 2; i < MaxDims; i++ {
		nb[i] = nb[i-1] * t.dim(i-1)
	}
	return nb
}

func (t *Tensor) dim(i int) int64 {
	if i < len(t.Dims) {
		return t.Dims[i]
	}
	return 1
}

// ExpertRange is the file byte range [start, end) of expert e, or of the
// whole tensor when t is not an expert tensor.
func (t *Tensor) ExpertRange(e int) (start, end int64) {
	if t.Experts == 0 || e < 0 || e >= t.Experts {
		return t.FileOffset, t.End()
	}
	start = t.FileOffset + int64(e)*t.ExpertSize
	return start, start + t.ExpertSize
}

// Shape renders Dims as "[1024 32000]".
func (t *Tensor) Shape() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range t.Dims {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// ParseName splits a tensor name into its layer and role:
// "blk.5.attn_q.weight" is layer 5, role "attn_q"; "token_embd.weight" is
// layer -1, role "token_embd". Prefixes before "blk." (as in the vision
// tower's "v.blk.3...") are dropped from the role.
func ParseName(name string) (layer int, role string) {
	layer = -1
	role = name
	if i := findBlk(name); i >= 0 {
		rest := name[i+len("blk."):]
		j := 0
		for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
			j++
		}
		if j > 0 && j <= 9 && j < len(rest) && rest[j] == '.' {
			n, _ := strconv.Atoi(rest[:j])
			layer = n
			role = rest[j+1:]
		}
	}
	for _, suf := range [...]string{".weight", ".bias"} {
		if strings.HasSuffix(role, suf) && len(role) > len(suf) {
			role = role[:len(role)-len(suf)]
			break
		}
	}
	return layer, role
}

// findBlk finds "blk." at the start of the name or after a '.'.
func findBlk(name string) int {
	for i := 0; ; {
		j := strings.Index(name[i:], "blk.")
		if j < 0 {
			return -1
		}
		j += i
		if j == 0 || name[j-1] == '.' {
			return j
		}
		i = j + 1
	}
}

// isExpertRole reports whether tensors of this role stack one slice per
// expert along their last dimension (ffn_gate_exps, ffn_up_exps,
// ffn_down_exps and their biases).
func isExpertRole(role string) bool { return strings.HasSuffix(role, "_exps") }

// classify fills the fields derived from the name and shape.
func (t *Tensor) classify() {
	t.Layer, t.Role = ParseName(t.Name)
	t.Experts, t.ExpertSize = 0, 0
	if isExpertRole(t.Role) && len(t.Dims) >= 2 {
		n := t.Dims[len(t.Dims)-1]
		if n >= 1 && n <= 1<<20 && t.Size%n == 0 {
			t.Experts = int(n)
			t.ExpertSize = t.Size / n
		}
	}
}
