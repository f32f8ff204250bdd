// Page faults (bpf/faults.bpf.h): each charged to the tensor slice of
// its address, and the page adds held back per thread until the fault
// that read them ahead is known.

package correlate

import (
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/wire"
)

// maxPending bounds the adds held back per thread while waiting for the
// fault that may have triggered them; a readahead window is at most a few
// MiB, far fewer folios than this.
const maxPending = 8192

type tidState struct {
	pending []event.Event
	// since is, per pending add, when its first page was added: a run's
	// Event.Ts is its last folio's, and the whole run must lie in the
	// fault's window to have been read ahead by it.
	since []uint64
}

// maxFreeTids bounds the per-thread states kept for reuse.
const maxFreeTids = 16

// faultSlice is the tensor slice of a fault's address. The kernel's
// resolution is used when it made one; a fault it did not try to resolve
// (start_ts 0: taken in kernel mode on a user address, no page_fault_user;
// any fault of a kernel without bpf_find_vma) or could not (vma_busy:
// another thread held the mmap lock) is looked up in the process's
// mappings. A fault the kernel resolved to no file is anonymous: the
// mappings are not consulted, as a file mapped there earlier may have
// been unmapped since.
func (c *Correlator) faultSlice(f *wire.FaultEvent, count bool) slice {
	dev, ino, off := f.Dev, f.Ino, f.FileOff
	if ino == 0 && (f.StartTs == 0 || c.offsetsInUserSpace || f.VmaBusy != 0) {
		if m := c.vm.resolve(f.Hdr.Tgid, f.Addr, f.Hdr.Ts); m != nil && m.ino != 0 {
			dev, ino, off = m.dev, m.ino, m.off+(f.Addr-m.start)
			if count {
				c.stats.FaultsByMaps++
			}
		}
	}
	if ino == 0 {
		return slice{tensor: event.TensorAnon, expert: -1, off: int64(f.Addr), file: int64(f.Addr), n: kernel.PageSize}
	}
	m := c.modelOf(dev, ino)
	if m == nil {
		return slice{tensor: event.TensorOther, expert: -1, off: int64(off), file: int64(off), n: kernel.PageSize}
	}
	return m.lookup(int64(off))
}

func (c *Correlator) fault(f *wire.FaultEvent) {
	hdr := &f.Hdr
	ev := &c.ev
	*ev = event.Event{Ts: hdr.Ts, Req: c.newReq(), Token: hdr.Token, Phase: hdr.Phase, Op: c.probeOp(hdr), Tid: hdr.Tid,
		Trigger: event.NoTensor, Expert: -1, Kind: event.KindFault, Class: f.Class, Bytes: kernel.PageSize}
	s := c.faultSlice(f, true)
	ev.Tensor, ev.Expert, ev.Offset = s.tensor, s.expert, s.off
	if f.StartTs != 0 && f.StartTs <= hdr.Ts && isCompleted(f.Class) {
		ev.Dur = hdr.Ts - f.StartTs
	}
	c.chargeFaults(hdr, ev.Tensor, ev.Expert, ev.Op, f.Class, 1, stallOf(ev.Dur, f.WaitNs, f.PreemptedNs))
	c.emit(ev)
}

// isCompleted says whether a fault of class was completed, as the kernel
// counts faults. An unaccounted one's "completion" is when the thread's
// next fault began: no stall can be told, and it is no fault the kernel
// counted. (A class this iocorr does not know is no counted fault either.)
func isCompleted(class uint8) bool {
	return class == uint8(wire.FaultClassFAULT_MINOR) || class == uint8(wire.FaultClassFAULT_MAJOR)
}

// chargeFaults charges n faults of class with their summed stall and wait to the
// aggregate row (token of hdr, tensor, expert, op) and to the token: the
// one charge of a fault record and of the kernel's count alike.
func (c *Correlator) chargeFaults(hdr *wire.EventHdr, tensor uint32, expert int16, op uint32, class uint8, n uint64, st stall) {
	a := c.agg(hdr.Token, tensor, expert, op)
	t := c.token(hdr)
	if !isCompleted(class) {
		a.Unaccounted += n
		t.Unaccounted += n
		return
	}
	for _, k := range [2]*event.Counters{a, &t.Counters} {
		k.Faults += n
		if class == uint8(wire.FaultClassFAULT_MAJOR) {
			k.Major += n
		} else {
			k.Minor += n
		}
		k.StallNS += st.total
		k.WaitNS += st.wait
		k.PreemptedNS += st.preempted
	}
}

// stall is faults' summed stall and its parts off the CPU: asleep, and
// preempted.
type stall struct{ total, wait, preempted uint64 }

// stallOf holds the parts the kernel summed to the stall: each thread's
// clock is read a little apart from the fault's start and end, so a part
// may pass the whole by a few ns; the sleep is taken first.
func stallOf(total, wait, preempted uint64) stall {
	wait = min(wait, total)
	return stall{total: total, wait: wait, preempted: min(preempted, total-wait)}
}

// faultCount charges the kernel's count of faults outside the model files
// as their records would have been charged, one by one: to the
// [anonymous] or [other file] pseudo tensor, per token and op.
func (c *Correlator) faultCount(fc *wire.FaultCountEvent) {
	var tensor uint32
	switch fc.Where {
	case uint8(wire.FaultWhereFAULT_WHERE_ANON):
		tensor = event.TensorAnon
	case uint8(wire.FaultWhereFAULT_WHERE_OTHER):
		tensor = event.TensorOther
	default:
		// A model's faults are never counted: a count that says so is
		// no count this iocorr knows.
		c.stats.Unattributed++
		return
	}
	c.stats.FaultsCounted += fc.Count
	c.chargeFaults(&fc.Hdr, tensor, -1, c.probeOp(&fc.Hdr), fc.Class, fc.Count, stallOf(fc.StallNs, fc.WaitNs, fc.PreemptedNs))
}

// flushTid emits the adds held back for tid; those inside fault f's
// window are charged to f's tensor as trigger.
func (c *Correlator) flushTid(tid uint32, f *wire.FaultEvent) {
	st := c.tids[tid]
	if st == nil || len(st.pending) == 0 {
		return
	}
	trig, texp := event.NoTensor, int16(-1)
	var tok, op uint32
	if f != nil && f.StartTs != 0 {
		s := c.faultSlice(f, false)
		trig, texp = s.tensor, s.expert
		tok, op = f.Hdr.Token, c.probeOp(&f.Hdr)
	}
	var trigBytes uint64
	for i := range st.pending {
		ev := &st.pending[i]
		if trig != event.NoTensor && st.since[i] >= f.StartTs && ev.Ts <= f.Hdr.Ts {
			ev.Trigger = trig
			trigBytes += ev.Bytes
		}
		c.emit(ev)
	}
	st.pending = st.pending[:0]
	st.since = st.since[:0]
	delete(c.tids, tid)
	if len(c.freeTids) < maxFreeTids {
		c.freeTids = append(c.freeTids, st)
	}
	if trigBytes > 0 {
		c.agg(tok, trig, texp, op).TriggerBytes += trigBytes
		c.token(&f.Hdr).TriggerBytes += trigBytes
	}
}

// tidState is tid's state, taken from the reused ones when it has none.
func (c *Correlator) tidState(tid uint32) *tidState {
	st := c.tids[tid]
	if st == nil {
		if n := len(c.freeTids); n > 0 {
			st, c.freeTids = c.freeTids[n-1], c.freeTids[:n-1]
		} else {
			st = &tidState{}
		}
		c.tids[tid] = st
	}
	return st
}
