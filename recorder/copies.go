package recorder

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/wire"
)

// copies is what llama.cpp copied out of the models' mappings while
// loading, per backend buffer: the weights a memory limit charges and the
// page cache cannot evict (a repacked copy, a --no-mmap load, lavapipe's
// or a driver's host memory). A command killed at load under a limit is
// told by them why. The drain goroutine adds; recordEnd reads.
type copies struct {
	mu    sync.Mutex
	names map[uint64]string // buffer → its name
	bufs  map[uint64]*bufCopy
}

// bufCopy is one buffer's copied weights.
type bufCopy struct {
	name    string
	bytes   uint64
	weights int
}

// onBufName notes a buffer's name.
func (c *copies) onBufName(e *wire.BufnameEvent) {
	if name := wire.CString(e.Name[:]); name != "" {
		c.mu.Lock()
		if c.names == nil {
			c.names = map[uint64]string{}
		}
		c.names[e.Buffer] = name
		c.mu.Unlock()
	}
}

// onPlace notes a weight copied from a model's mapping (fromModel) into
// its buffer.
func (c *copies) onPlace(e *wire.PlaceEvent, fromModel bool) {
	if !fromModel {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bufs == nil {
		c.bufs = map[uint64]*bufCopy{}
	}
	b := c.bufs[e.Buffer]
	if b == nil {
		b = &bufCopy{}
		c.bufs[e.Buffer] = b
	}
	b.bytes += e.Size
	b.weights++
}

// byName sums the copies by buffer name, the largest first; a buffer of
// no name read is "a buffer of no name".
func (c *copies) byName() []bufCopy {
	c.mu.Lock()
	defer c.mu.Unlock()
	sums := map[string]*bufCopy{}
	var out []bufCopy
	for buf, b := range c.bufs {
		name := c.names[buf]
		if name == "" {
			name = "a buffer of no name"
		}
		s := sums[name]
		if s == nil {
			s = &bufCopy{name: name}
			sums[name] = s
		}
		s.bytes += b.bytes
		s.weights += b.weights
	}
	for _, s := range sums {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b bufCopy) int {
		return cmp.Or(cmp.Compare(b.bytes, a.bytes), strings.Compare(a.name, b.name))
	})
	return out
}

// killedUnder says why a command SIGKILLed under a memory limit of limit
// bytes was likely killed, from what it had copied out of the model's
// mapping and the cgroup's peak (peak 0: not known), and which flag
// avoids it where one does.
func killedUnder(limit int64, peak uint64, cs []bufCopy) string {
	peakText := ""
	if peak > 0 {
		peakText = fmt.Sprintf(", peak %s", units.Bytes(float64(peak)))
	}
	if len(cs) == 0 {
		return fmt.Sprintf("the %s memory limit may be too small for the command itself (no weight was copied out of the model's mapping%s; see cgroup_counters)", units.ExactSize(limit), peakText)
	}
	var total uint64
	parts := make([]string, len(cs))
	var advice []string
	for i, c := range cs {
		total += c.bytes
		parts[i] = fmt.Sprintf("%s %s in %d weights", c.name, units.Bytes(float64(c.bytes)), c.weights)
		switch {
		case strings.Contains(c.name, "REPACK"):
			advice = append(advice, "the CPU backend repacks quantized weights into memory the limit charges and the page cache cannot evict: --no-repack leaves them in the model's mapping")
		case c.name == "CPU":
			advice = append(advice, "the weights were read into memory rather than mapped (--no-mmap, or a load mode that reads): mapped, the page cache can evict them")
		}
	}
	text := fmt.Sprintf("the command had copied %s of weights out of the model's mapping (%s) under a %s memory limit%s", units.Bytes(float64(total)), strings.Join(parts, "; "), units.ExactSize(limit), peakText)
	if len(advice) > 0 {
		text += ": " + strings.Join(advice, "; ")
	}
	return text
}
