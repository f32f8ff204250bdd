package recorder

import (
	"fmt"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/gguf"
)

// layoutCheck validates graph nodes read with the ggml struct layout
// against the traced models' GGUF tensors (bpf.ValidateNode), node by
// node: a layout that holds for the first graph but not a later one is
// as wrong.
type layoutCheck struct {
	byName map[string]bpf.Weight
	seen   map[uint64]bool // model inodes in byName
	nodes  int             // nodes validated
}

// weight looks a tensor up in the models known now (a model mapped after
// the check began is added on first use).
func (c *layoutCheck) weight(ms *models) func(string) (bpf.Weight, bool) {
	for _, mf := range ms.files() {
		if c.seen[mf.Ino] {
			continue
		}
		if c.byName == nil {
			c.byName, c.seen = map[string]bpf.Weight{}, map[uint64]bool{}
		}
		c.seen[mf.Ino] = true
		for _, t := range mf.Tensors {
			typ, ok := gguf.ParseType(t.Type)
			if !ok {
				continue
			}
			gt := gguf.Tensor{Name: t.Name, Type: typ, FileOffset: t.Offset}
			for _, d := range t.Shape {
				gt.Dims = append(gt.Dims, int64(d))
			}
			w := bpf.Weight{Type: uint32(typ), FileOff: uint64(t.Offset)}
			nb := gt.Strides()
			for i := range w.Ne {
				w.Ne[i], w.Nb[i] = 1, uint64(nb[i])
				if i < len(t.Shape) {
					w.Ne[i] = t.Shape[i]
				}
			}
			c.byName[t.Name] = w
		}
	}
	return func(name string) (bpf.Weight, bool) {
		w, ok := c.byName[name]
		return w, ok
	}
}

// layoutFailed says what a layout that failed validation costs the run.
func layoutFailed(lay bpf.Layout, err error) string {
	return fmt.Sprintf("ggml struct layout (%s) failed validation against the target: %v; graph nodes, expert picks and ops are not recorded (their probes were detached, and what they read before is left out of the record)", lay.Source, err)
}
