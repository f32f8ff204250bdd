// Block requests (bpf/block.bpf.h): a request's sectors back to file
// offsets through the model's extents.

package correlate

import (
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/wire"
)

// blockWrite is the class of block events that are not reads.
const blockWrite = 1

// readBeneath says whether a read request at byte d of disk dev reads a
// file some model's disk is stacked on.
func (c *Correlator) readBeneath(dev uint32, d uint64) bool {
	for _, m := range c.models {
		if m.readBeneath(dev, d) {
			return true
		}
	}
	return false
}

func (c *Correlator) block(b *wire.BlockEvent) {
	hdr := &b.Hdr
	class := uint8(0)
	if kernel.BlockOpOf(b.CmdFlags) != kernel.BlockRead { // writes, flushes, discards...
		class = blockWrite
	} else if c.readBeneath(b.Dev, b.Sector*512) {
		class = event.ClassBeneath
	}
	base := event.Event{Ts: hdr.Ts, Req: c.newReq(), Token: hdr.Token, Op: c.probeOp(hdr), Tid: hdr.Tid, Trigger: event.NoTensor,
		Expert: -1, Kind: event.KindBlock, Phase: hdr.Phase, Class: class}
	if b.CompletionUnseen() {
		// Recorded when BPF learned the request was done (its reissue,
		// or the run's end): the time between is no latency.
		base.Class |= event.ClassCompletionUnseen
	} else if b.IssueTs != 0 && b.IssueTs <= hdr.Ts {
		base.Dur = hdr.Ts - b.IssueTs
	}
	t := c.token(hdr)
	if class == 0 {
		t.ReadBytes += uint64(b.Bytes)
		t.BlockReqs++
	}
	c.slices = c.slices[:0]
	disk, n := b.Sector*512, uint64(b.Bytes)
	var inside uint64
	// The slice holding the request's first byte: in no model's extent,
	// the "[other file]" slice appended last.
	start := -1
	for _, m := range c.models {
		if !m.OnDisk(b.Dev) {
			continue
		}
		before := len(c.slices)
		var k uint64
		var first bool
		c.slices, k, first = m.appendDiskSlices(c.slices, disk, n)
		inside += k
		if first && len(c.slices) > before {
			start = before
		}
	}
	// A request of no bytes is kept too, as one of the "[other file]", so
	// that the tensors' requests add up to the token's.
	if inside < n || len(c.slices) == 0 {
		c.slices = append(c.slices, slice{tensor: event.TensorOther, expert: -1, off: int64(disk), file: int64(disk), n: int64(n - inside)})
	}
	if start < 0 {
		start = len(c.slices) - 1
	}
	for i := range c.slices {
		s := &c.slices[i]
		ev := base
		ev.Tensor, ev.Expert, ev.Offset, ev.Bytes = s.tensor, s.expert, s.off, uint64(s.n)
		if class == 0 {
			a := c.agg(ev.Token, s.tensor, s.expert, ev.Op)
			a.ReadBytes += uint64(s.n)
			// A request counts where its first byte lies, as a page
			// added does, so that any grouping of the aggregates (by
			// token, layer, expert...) sums to the requests it holds:
			// counted once per (tensor, expert) touched, a token's
			// requests summed 11 213 where the disk served 6 662.
			if i == start {
				a.BlockReqs++
			}
		}
		c.ev = ev
		c.emit(&c.ev)
	}
}
