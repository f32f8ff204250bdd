package recorder

import (
	"fmt"
	"sync"

	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/wire"
)

// Thresholds of the layout's verdict. A wrong layout reads every node
// wrong, so it fails most nodes of any graph; a right one can still meet
// a node the target made oddly (a weight of a model the run does not
// trace), which is counted and left out, not a reason to lose the run.
const (
	// layoutQuorum is how many nodes must have been checked, in one graph
	// or in the run, before most of them failing condemns the layout.
	layoutQuorum = 8
	// maxNodeFailures bounds the distinct failing nodes meta.json names
	// (and the ingest leaves out): more than a layout that holds could
	// ever explain.
	maxNodeFailures = 256
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
	// graph is the graph whose nodes arrive now, gNodes and gFailed its
	// nodes checked and failed so far.
	graph           uint64
	gNodes, gFailed int
	failedKeys      map[rundir.NodeFailure]bool

	mu  sync.Mutex
	ok  bool  // a node validated and the layout holds
	err error // why the layout is wrong; its probes are then off
	// failed is the nodes that failed under a layout that holds.
	failed rundir.NodeFailures
}

// check validates node n of graph graphID, whose target has nOps op
// names, with the tensors of the models known now. changed says the
// verdict or the named failures changed; err is the layout's failure,
// once most nodes fail (a graph's or the run's).
func (c *layoutCheck) check(graphID uint64, n ggml.Node, nOps int, ms *models) (changed bool, err error) {
	if failed := c.failure(); failed != nil {
		return false, failed // judged: its probes are off, what follows was read before
	}
	nerr := ggml.ValidateNode(n, nOps, c.weight(ms))
	c.nodes++
	if graphID != c.graph || c.gNodes == 0 {
		c.graph, c.gNodes, c.gFailed = graphID, 0, 0
	}
	c.gNodes++
	c.mu.Lock()
	defer c.mu.Unlock()
	c.failed.Checked++
	if nerr == nil {
		changed, c.ok = !c.ok, true
		return changed, nil
	}
	c.gFailed++
	c.failed.Failed++
	key := rundir.NodeFailure{Node: wire.CString(n.Name), Weight: wire.CString(n.WeightName)}
	if !c.failedKeys[key] {
		if c.failedKeys == nil {
			c.failedKeys = map[rundir.NodeFailure]bool{}
		}
		c.failedKeys[key] = true
		key.Why = nerr.Error()
		c.failed.Nodes = append(c.failed.Nodes, key)
		changed = true
	}
	switch {
	case c.gNodes >= layoutQuorum && 2*c.gFailed > c.gNodes:
		c.err = fmt.Errorf("%d of %d nodes of a graph failed, the last: %w", c.gFailed, c.gNodes, nerr)
	case c.failed.Checked >= layoutQuorum && 2*c.failed.Failed > c.failed.Checked:
		c.err = fmt.Errorf("%d of the run's %d graph nodes failed, the last: %w", c.failed.Failed, c.failed.Checked, nerr)
	case len(c.failed.Nodes) > maxNodeFailures:
		c.err = fmt.Errorf("more than %d distinct graph nodes failed, the last: %w", maxNodeFailures, nerr)
	default:
		return changed, nil
	}
	c.ok = false
	return true, c.err
}

// unreadable fails a layout under which graphs were computed but none of
// their nodes could be read (a wrong node count or array offset), or
// whose every node failed in a run too short to reach the quorum: it is
// as unproven as one that failed, and the expert ids were read with it.
// It returns the failure, or nil when there is none to say.
func (c *layoutCheck) unreadable(graphs uint64, models int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if graphs == 0 || c.err != nil || models == 0 {
		return nil
	}
	switch {
	case c.nodes == 0:
		c.err = fmt.Errorf("%d graphs were computed but none of their nodes could be read", graphs)
	case c.failed.Failed == c.failed.Checked:
		c.err = fmt.Errorf("none of the %d graph nodes read validated, the first: %s", c.failed.Checked, c.failed.Nodes[0].Why)
	default:
		return nil
	}
	return c.err
}

// failure is why the layout failed, nil while it holds.
func (c *layoutCheck) failure() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// verdict is whether the layout validated, the nodes that failed under a
// layout that holds, and why the layout failed.
func (c *layoutCheck) verdict() (ok bool, failed rundir.NodeFailures, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	failed = c.failed
	failed.Nodes = append([]rundir.NodeFailure(nil), c.failed.Nodes...)
	return c.ok, failed, c.err
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

// nodeOf is a node event as ggml.ValidateNode reads it: its weight is a
// model's only where the kernel found its data in a traced model's file
// (ms knows its device and inode), not in any file-backed mapping.
func nodeOf(e *wire.NodeEvent, ms *models) ggml.Node {
	dev, ino, off := e.Dev, e.Ino, e.FileOff
	if e.VmaBusy != 0 {
		dev, ino, off = fileAt(e.Hdr.Tgid, e.WeightData)
	}
	return ggml.Node{Name: e.NodeName[:], WeightName: e.WeightName[:], Op: e.Op, WeightType: e.WeightType,
		WeightNe: e.WeightNe, WeightNb: e.WeightNb, InModel: ino != 0 && ms.known(dev, ino), FileOff: off}
}

// layoutFailed says what a layout that failed validation costs the run.
func layoutFailed(lay ggml.Layout, err error) string {
	return fmt.Sprintf("ggml struct layout (%s) failed validation against the target: %v; graph nodes, expert picks and ops are not recorded (their probes were detached, and what they read before is left out of the record)", lay.Source, err)
}
