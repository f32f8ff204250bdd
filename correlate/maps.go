package correlate

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/procmaps"
	"github.com/iocorr/iocorr/wire"
)

// mapping is one virtual memory area known to map a file (or, from a maps
// snapshot, anonymous memory: ino 0).
type mapping struct {
	start, end uint64 // [start, end) virtual addresses
	off        uint64 // file offset of start
	ino        uint64
	dev        uint32
	ts         uint64 // when it was known to exist (mmap return, snapshot)
}

// addrSpace is the mappings of one process, sorted by start and disjoint:
// a newer mapping over an older one replaces the part it covers, as
// MAP_FIXED does in the kernel (ld.so maps a library whole, then maps its
// segments over it).
type addrSpace struct {
	ms []mapping
}

func (a *addrSpace) insert(m mapping) {
	if m.end <= m.start {
		return
	}
	out := a.ms[:0:0]
	for _, o := range a.ms {
		if o.end <= m.start || o.start >= m.end {
			out = append(out, o)
			continue
		}
		if o.start < m.start {
			l := o
			l.end = m.start
			out = append(out, l)
		}
		if o.end > m.end {
			r := o
			r.off += m.end - o.start
			r.start = m.end
			out = append(out, r)
		}
	}
	out = append(out, m)
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	a.ms = out
}

func (a *addrSpace) find(addr uint64) *mapping {
	i := sort.Search(len(a.ms), func(i int) bool { return a.ms[i].end > addr })
	if i < len(a.ms) && a.ms[i].start <= addr {
		return &a.ms[i]
	}
	return nil
}

// snapshot is a parsed /proc/PID/maps copy.
type snapshot struct {
	ts    uint64
	space addrSpace
}

// vmTracker answers "which file did address A of process P map at time T"
// for faults the kernel could not resolve. It knows the mmap calls seen in
// the event stream (exact in time) and the maps snapshots the recorder
// took (complete, including what was mapped before tracing began, such as
// the executable).
type vmTracker struct {
	live  map[uint32]*addrSpace  // tgid → mappings from EV_MMAP, holes from EV_MUNMAP
	snaps map[uint32][]*snapshot // pid → snapshots by time
}

func newVMTracker() *vmTracker {
	return &vmTracker{live: map[uint32]*addrSpace{}, snaps: map[uint32][]*snapshot{}}
}

// space is tgid's live mappings, made on first use.
func (v *vmTracker) space(tgid uint32) *addrSpace {
	a := v.live[tgid]
	if a == nil {
		a = &addrSpace{}
		v.live[tgid] = a
	}
	return a
}

func (v *vmTracker) mmap(e *wire.MmapEvent) {
	v.space(e.Hdr.Tgid).insert(mapping{start: e.Start, end: e.End, off: e.Pgoff * kernel.PageSize, ino: e.Ino, dev: e.Dev, ts: e.Hdr.Ts})
}

// munmap leaves the range unmapped from the call's time on: a hole (ino
// 0) newer than the snapshots that still show what was there, so that a
// fault in anonymous memory that reuses the range (llama.cpp unmaps what
// of a model went to a GPU) is not charged to the file.
func (v *vmTracker) munmap(e *wire.MunmapEvent) {
	v.space(e.Hdr.Tgid).insert(mapping{start: e.Start, end: e.End, ts: e.Hdr.Ts})
}

// resolve finds the mapping that held addr of tgid at ts: the newer of the
// mmap seen in the stream and the entry of the snapshot closest before ts
// (or the first snapshot, for faults before any was taken).
func (v *vmTracker) resolve(tgid uint32, addr, ts uint64) *mapping {
	var live, snap *mapping
	if a := v.live[tgid]; a != nil {
		if m := a.find(addr); m != nil && m.ts <= ts {
			live = m
		}
	}
	if ss := v.snaps[tgid]; len(ss) > 0 {
		i := sort.Search(len(ss), func(i int) bool { return ss[i].ts > ts })
		if i > 0 {
			i--
		}
		snap = ss[i].space.find(addr)
	}
	switch {
	case live == nil:
		return snap
	case snap == nil || live.ts >= snap.ts:
		return live
	}
	return snap
}

// addSnapshot parses a /proc/PID/maps copy taken at monotonic time ts.
func (v *vmTracker) addSnapshot(pid uint32, ts uint64, r io.Reader) error {
	ms, err := procmaps.Parse(r)
	if err != nil {
		return err
	}
	s := &snapshot{ts: ts}
	for _, m := range ms {
		s.space.ms = append(s.space.ms, mapping{start: m.Start, end: m.End, off: m.Offset, ino: m.Inode,
			dev: kernel.Dev(m.Major, m.Minor), ts: ts})
	}
	sort.Slice(s.space.ms, func(i, j int) bool { return s.space.ms[i].start < s.space.ms[j].start })
	ss := append(v.snaps[pid], s)
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].ts < ss[j].ts })
	v.snaps[pid] = ss
	return nil
}

// LoadMaps reads the maps snapshots listed in the run metadata from run
// directory dir. A snapshot that is missing is skipped (faults it would
// have resolved stay anonymous); one that is malformed is an error.
func (c *Correlator) LoadMaps(dir string) error {
	for _, s := range c.meta.Maps {
		f, err := os.Open(filepath.Join(dir, s.File))
		if os.IsNotExist(err) {
			c.stats.MapsMissing++
			continue
		}
		if err != nil {
			return fmt.Errorf("maps snapshot: %w", err)
		}
		err = c.vm.addSnapshot(uint32(s.PID), s.MonoNS, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("maps snapshot %s: %w", s.File, err)
		}
	}
	return nil
}
