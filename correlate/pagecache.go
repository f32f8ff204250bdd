// The page cache's adds and deletions (bpf/pagecache.bpf.h), cut at
// tensor and expert boundaries.

package correlate

import (
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/wire"
)

func (c *Correlator) pageAdd(p *wire.PageEvent) {
	n := int64(1) << min(p.Order, 20)
	c.added(&p.Hdr, c.newReq(), p.Hdr.Ts, p.Dev, p.Ino, int64(p.Index)*kernel.PageSize, n*kernel.PageSize)
}

func (c *Correlator) pageDel(p *wire.PageEvent) {
	n := int64(1) << min(p.Order, 20)
	c.deleted(&p.Hdr, c.newReq(), p.Dev, p.Ino, int64(p.Index)*kernel.PageSize, n*kernel.PageSize)
}

// pageRun charges a run of folios as the per-folio records would have
// been charged: every byte range and page once, at the run's stamp.
func (c *Correlator) pageRun(p *wire.PageRunEvent) {
	var charge func(first, n uint64)
	req := c.newReq() // every range of the run is a slice of this one record
	switch p.Kind {
	case uint16(wire.EventTypeEV_PAGE_ADD):
		since := p.FirstTs
		if since == 0 || since > p.Hdr.Ts {
			since = p.Hdr.Ts
		}
		charge = func(first, n uint64) {
			c.added(&p.Hdr, req, since, p.Dev, p.Ino, int64(first)*kernel.PageSize, int64(n)*kernel.PageSize)
		}
	case uint16(wire.EventTypeEV_PAGE_DEL):
		charge = func(first, n uint64) {
			c.deleted(&p.Hdr, req, p.Dev, p.Ino, int64(first)*kernel.PageSize, int64(n)*kernel.PageSize)
		}
	default:
		c.stats.Unattributed++
		return
	}
	if p.Index >= 1<<40 || !p.Ranges(charge) {
		c.stats.Unattributed++
	}
}

// added holds back the adds of file range [off, off+n) until the thread's
// fault, if any, tells their trigger; first is when the first page of it
// was added, hdr.Ts when the last was.
func (c *Correlator) added(hdr *wire.EventHdr, req uint32, first uint64, dev uint32, ino uint64, off, n int64) {
	m := c.modelOf(dev, ino)
	t := c.token(hdr)
	op := c.probeOp(hdr)
	st := c.tidState(hdr.Tid)
	c.slices = c.fileSlices(c.slices[:0], m, off, n)
	for i := range c.slices {
		s := &c.slices[i]
		if len(st.pending) >= maxPending {
			c.stats.PendingCapped++
			c.flushTid(hdr.Tid, nil)
			st = c.tidState(hdr.Tid) // the flush let the state go
		}
		st.pending = append(st.pending, event.Event{Ts: hdr.Ts, Req: req, Offset: s.off, Bytes: uint64(s.n), Tensor: s.tensor,
			Token: hdr.Token, Op: op, Tid: hdr.Tid, Trigger: event.NoTensor, Expert: s.expert, Kind: event.KindPageAdd, Phase: hdr.Phase})
		st.since = append(st.since, first)
		a := c.agg(hdr.Token, s.tensor, s.expert, op)
		a.AddedBytes += uint64(s.n)
		a.PagesAdded += s.pagesFrom()
	}
	t.AddedBytes += uint64(n)
	t.PagesAdded += uint64(n / kernel.PageSize)
}

func (c *Correlator) deleted(hdr *wire.EventHdr, req uint32, dev uint32, ino uint64, off, n int64) {
	m := c.modelOf(dev, ino)
	t := c.token(hdr)
	op := c.probeOp(hdr)
	c.slices = c.fileSlices(c.slices[:0], m, off, n)
	for i := range c.slices {
		s := &c.slices[i]
		c.ev = event.Event{Ts: hdr.Ts, Req: req, Offset: s.off, Bytes: uint64(s.n), Tensor: s.tensor, Token: hdr.Token, Op: op,
			Tid: hdr.Tid, Trigger: event.NoTensor, Expert: s.expert, Kind: event.KindPageDel, Phase: hdr.Phase}
		a := c.agg(hdr.Token, s.tensor, s.expert, op)
		a.EvictedBytes += uint64(s.n)
		a.PagesEvicted += s.pagesFrom()
		c.emit(&c.ev)
	}
	t.EvictedBytes += uint64(n)
	t.PagesEvicted += uint64(n / kernel.PageSize)
}

// fileSlices is m's tensor slices of a file range, or one "[other file]"
// slice when the file is not a model.
func (c *Correlator) fileSlices(dst []slice, m *modelIndex, off, n int64) []slice {
	if m == nil {
		return append(dst, slice{tensor: event.TensorOther, expert: -1, off: off, file: off, n: n})
	}
	return m.appendSlices(dst, off, n)
}
