// read(2) calls on model files (bpf/reads.bpf.h).

package correlate

import (
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/wire"
)

// read charges the bytes a read call returned to the tensors and expert
// slices of the file range it read (the kernel recorded only model files).
func (c *Correlator) read(rd *wire.ReadEvent) {
	hdr := &rd.Hdr
	base := event.Event{Ts: hdr.Ts, Req: c.newReq(), Token: hdr.Token, Op: c.probeOp(hdr), Tid: hdr.Tid, Trigger: event.NoTensor,
		Expert: -1, Kind: event.KindRead, Phase: hdr.Phase, Class: uint8(rd.Kind)}
	if rd.StartTs != 0 && rd.StartTs <= hdr.Ts {
		base.Dur = hdr.Ts - rd.StartTs
	}
	c.token(hdr).RequestedBytes += rd.Bytes
	c.slices = c.fileSlices(c.slices[:0], c.modelOf(rd.Dev, rd.Ino), int64(rd.Offset), int64(rd.Bytes))
	for i := range c.slices {
		s := &c.slices[i]
		ev := base
		ev.Tensor, ev.Expert, ev.Offset, ev.Bytes = s.tensor, s.expert, s.off, uint64(s.n)
		c.agg(ev.Token, s.tensor, s.expert, ev.Op).RequestedBytes += uint64(s.n)
		c.ev = ev
		c.emit(&c.ev)
	}
}
