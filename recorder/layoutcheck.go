package recorder

import (
	"fmt"
	"sync"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/wire"
)

// layoutCheck validates graph nodes read with the ggml struct layout
// against the traced models' GGUF tensors (ggml.ValidateNode), node by
// node: a layout that holds for the first graph but not a later one is
// as wrong. The drain goroutine checks; its verdict is read by any.
type layoutCheck struct {
	// Touched only by the goroutine that reads the ring.
	byName map[string]ggml.Weight
	seen   map[uint64]bool // model inodes in byName
	nodes  int             // nodes validated

	mu  sync.Mutex
	ok  bool  // a node validated and none failed
	err error // the first failure; the layout's probes are then off
}

// check validates node n of a graph whose target has nOps op names, with
// the tensors of the models known now; changed says the verdict changed
// (the first node that validates, or the first that fails: err).
func (c *layoutCheck) check(n ggml.Node, nOps int, ms *models) (changed bool, err error) {
	err = ggml.ValidateNode(n, nOps, c.weight(ms))
	c.nodes++
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err, c.ok = err, false
		return true, err
	}
	changed, c.ok = !c.ok, true
	return changed, nil
}

// unreadable fails a layout under which graphs were computed but none of
// their nodes could be read (a wrong node count or array offset): it is
// as unproven as one that failed, and the expert ids were read with it.
// It returns the failure, or nil when there is none to say.
func (c *layoutCheck) unreadable(graphs uint64, models int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if graphs == 0 || c.nodes > 0 || c.err != nil || models == 0 {
		return nil
	}
	c.err = fmt.Errorf("%d graphs were computed but none of their nodes could be read", graphs)
	return c.err
}

// verdict is whether the layout validated, and why it failed.
func (c *layoutCheck) verdict() (ok bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok, c.err
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
func nodeOf(e *wire.NodeEvent) ggml.Node {
	return ggml.Node{Name: e.NodeName[:], WeightName: e.WeightName[:], Op: e.Op, WeightType: e.WeightType,
		WeightNe: e.WeightNe, WeightNb: e.WeightNb, Ino: e.Ino, FileOff: e.FileOff}
}

// layoutFailed says what a layout that failed validation costs the run.
func layoutFailed(lay ggml.Layout, err error) string {
	return fmt.Sprintf("ggml struct layout (%s) failed validation against the target: %v; graph nodes, expert picks and ops are not recorded (their probes were detached, and what they read before is left out of the record)", lay.Source, err)
}
