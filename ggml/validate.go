package ggml

import (
	"fmt"

	"github.com/iocorr/iocorr/gguf"
)

// Weight is what a traced model's GGUF says about a tensor, for
// ValidateNode: its ggml type, shape and strides (ne, nb; unused
// dimensions 1) and its file offset.
type Weight struct {
	Type    uint32
	Ne, Nb  [4]uint64
	FileOff uint64
}

// WeightOf is the Weight of a GGUF tensor of type typeName (as a GGUF
// names it), shape ne and absolute file offset off: ggml's nb follow from
// the type and shape. It is false for a type ggml does not know.
func WeightOf(typeName string, ne []uint64, off int64) (Weight, bool) {
	typ, ok := gguf.ParseType(typeName)
	if !ok {
		return Weight{}, false
	}
	t := gguf.Tensor{Type: typ, FileOffset: off}
	for _, d := range ne {
		t.Dims = append(t.Dims, int64(d))
	}
	w := Weight{Type: uint32(typ), FileOff: uint64(off)}
	nb := t.Strides()
	for i := range w.Ne {
		w.Ne[i], w.Nb[i] = 1, uint64(nb[i])
		if i < len(ne) {
			w.Ne[i] = ne[i]
		}
	}
	return w, true
}

// Node is a graph node as the probes read it with a Layout: the node's
// and its weight's names as C char arrays, the op, and the weight's type,
// ne and nb. InModel says the kernel found the weight's data in a traced
// model's file, at FileOff. Data anywhere else is not InModel, whatever
// backs it: anonymous memory (a KV cache, a repacked copy), a GPU
// driver's mapping of its device file (/dev/nvidia0, /dev/dri/renderD128,
// /dev/kfd), a memfd, shmem, or a file that is no model.
type Node struct {
	Name, WeightName   []int8
	Op, WeightType     uint32
	WeightNe, WeightNb [4]uint64
	InModel            bool
	FileOff            uint64
}

// ValidateNode checks that a node read with the layout looks like ggml
// data: printable, terminated names, a known op (of nOps; 0: not known),
// a sane type and shape — and, for a weight the kernel found in a traced
// model's file, that it is a tensor of that model (weight looks it up by
// name) with the GGUF's type, ne, nb and offset. Only a model's own bytes
// are compared with its GGUF: a file-backed mapping is no evidence of a
// model read, since GPU drivers map host-visible buffers (graph inputs
// among them) from device files and memfds. Names, ops and shapes read at
// wrong offsets cannot all agree with the model by chance; one node that
// fails can still be the target's own oddity, so what a failure means for
// the layout is the caller's to judge from many nodes.
func ValidateNode(e Node, nOps int, weight func(name string) (Weight, bool)) error {
	var end [2]int // of the names: where their NUL is
	for k, n := range []struct {
		what string
		b    []int8
	}{{"node name", e.Name}, {"weight name", e.WeightName}} {
		end[k] = -1
		for i, c := range n.b {
			if c == 0 {
				end[k] = i
				break
			}
			if c < 0x20 || c > 0x7e {
				return fmt.Errorf("%s has byte %#x at %d", n.what, byte(c), i)
			}
		}
		if end[k] < 0 {
			return fmt.Errorf("%s is not NUL-terminated", n.what)
		}
	}
	if nOps > 0 && int(e.Op) >= nOps {
		return fmt.Errorf("op %d out of range (the target has %d ops)", e.Op, nOps)
	}
	if e.WeightType > 64 {
		return fmt.Errorf("weight type %d out of range", e.WeightType)
	}
	for i, ne := range e.WeightNe {
		if ne == 0 || ne > 1<<40 {
			return fmt.Errorf("weight ne[%d] = %d", i, ne)
		}
	}
	if !e.InModel || weight == nil {
		return nil // not a model's bytes: ggml data with nothing to compare it with
	}
	name := string(bytesOf(e.WeightName[:end[1]]))
	w, ok := weight(name)
	if !ok {
		return fmt.Errorf("weight %q, read from a model file, is no tensor of the traced models", name)
	}
	switch {
	case e.WeightType != w.Type:
		return fmt.Errorf("weight %s has type %d, the GGUF says %d", name, e.WeightType, w.Type)
	case e.WeightNe != w.Ne:
		return fmt.Errorf("weight %s has ne %v, the GGUF says %v", name, e.WeightNe, w.Ne)
	case e.WeightNb != w.Nb:
		return fmt.Errorf("weight %s has nb %v, the GGUF's type and shape give %v", name, e.WeightNb, w.Nb)
	case e.FileOff != w.FileOff:
		return fmt.Errorf("weight %s is at file offset %d, the GGUF says %d", name, e.FileOff, w.FileOff)
	}
	return nil
}

func bytesOf(b []int8) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = byte(c)
	}
	return out
}
