package recorder

import (
	"fmt"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
)

// layoutCheck validates graph nodes read with the ggml struct layout
// against the traced models' GGUF tensors (ggml.ValidateNode), node by
// node: a layout that holds for the first graph but not a later one is
// as wrong.
type layoutCheck struct {
	byName map[string]ggml.Weight
	seen   map[uint64]bool // model inodes in byName
	nodes  int             // nodes validated
}

// weight looks a tensor up in the models known now (a model mapped after
// the check began is added on first use).
func (c *layoutCheck) weight(ms *models) func(string) (ggml.Weight, bool) {
	for _, mf := range ms.files() {
		if c.seen[mf.Ino] {
			continue
		}
		if c.byName == nil {
			c.byName, c.seen = map[string]ggml.Weight{}, map[uint64]bool{}
		}
		c.seen[mf.Ino] = true
		for _, t := range mf.Tensors {
			if w, ok := ggml.WeightOf(t.Type, t.Shape, t.Offset); ok {
				c.byName[t.Name] = w
			}
		}
	}
	return func(name string) (ggml.Weight, bool) {
		w, ok := c.byName[name]
		return w, ok
	}
}

// nodeOf is a node event as ggml.ValidateNode reads it.
func nodeOf(e *bpf.IocorrNodeEvent) ggml.Node {
	return ggml.Node{Name: e.NodeName[:], WeightName: e.WeightName[:], Op: e.Op, WeightType: e.WeightType,
		WeightNe: e.WeightNe, WeightNb: e.WeightNb, Ino: e.Ino, FileOff: e.FileOff}
}

// layoutFailed says what a layout that failed validation costs the run.
func layoutFailed(lay ggml.Layout, err error) string {
	return fmt.Sprintf("ggml struct layout (%s) failed validation against the target: %v; graph nodes, expert picks and ops are not recorded (their probes were detached, and what they read before is left out of the record)", lay.Source, err)
}
