package bpf

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/wire"
)

// FAULT_COUNT_* of faults.bpf.h: the faults outside the model files that
// the kernel counts (cfg.count_faults).
const (
	faultCountAnon  = 1
	faultCountOther = 2
)

// countFaultsConst is cfg.count_faults for these options and the path the
// kernel gave the fault offsets. Only a kernel that resolves faults itself
// (bpf_find_vma) can tell where a fault is; elsewhere user space does, and
// every fault is a record. In the pagecache tier a fault in another file
// stays a record: the page-cache adds inside its window are what it read
// ahead ([other file]'s readahead_trigger_bytes), and only a record has a
// window. An anonymous fault reads no file.
func (o *Options) countFaultsConst(caps []capChoice) uint8 {
	if o.Probes.Faults || !chosenPrimary(caps, CapOffsets) {
		return 0
	}
	if o.RecordsPageCache() {
		return faultCountAnon
	}
	return faultCountAnon | faultCountOther
}

// FaultsCounted names the faults outside the model files this tracer
// counts in the kernel instead of recording each ("" when it records
// every fault), as meta.json's faults_counted says it.
func (t *Tracer) FaultsCounted() string {
	var kinds []string
	if t.countFaults&faultCountAnon != 0 {
		kinds = append(kinds, "anonymous memory")
	}
	if t.countFaults&faultCountOther != 0 {
		kinds = append(kinds, "files that are no model")
	}
	return strings.Join(kinds, ", ")
}

// MarkNotModel tells the kernel that file (dev, ino), which a traced
// process mapped, is no model: its faults are counted from now on (when
// the tracer counts faults in other files) rather than recorded. Until
// then they are records, as a file not decided may be a model.
func (t *Tracer) MarkNotModel(dev uint32, ino uint64) error {
	if t.countFaults&faultCountOther == 0 {
		return nil
	}
	// A process maps its libraries in hundreds of calls: one update each.
	id := fileID{dev: uint64(dev), ino: ino}
	t.notModelsMu.Lock()
	defer t.notModelsMu.Unlock()
	if t.notModels[id] {
		return nil
	}
	k := IocorrFileKey{Ino: ino, Dev: dev}
	if err := t.objs.NotModels.Update(&k, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("marking file %s ino %d as no model: %w", kernel.DevString(dev), ino, err)
	}
	if t.notModels == nil {
		t.notModels = map[fileID]bool{}
	}
	t.notModels[id] = true
	return nil
}

// FaultCounts returns the kernel's counts of faults outside the model
// files as records, one per thread, stamp and class, in the order of
// their last fault: the spool takes them after the ring's last record.
// Read once, at the run's end.
func (t *Tracer) FaultCounts() ([]wire.FaultCountEvent, error) {
	var (
		k   IocorrFaultCountKey
		v   IocorrFaultCount
		out []wire.FaultCountEvent
		it  = t.objs.FaultCounts.Iterate()
	)
	for it.Next(&k, &v) {
		out = append(out, wire.FaultCountEvent{
			Hdr: wire.EventHdr{Ts: v.LastTs, Tgid: k.Tgid, Tid: k.Tid, Token: k.Token, Op: k.Op,
				Type: uint16(wire.EventTypeEV_FAULT_COUNT), Phase: k.Phase},
			FirstTs: v.FirstTs, Count: v.Count, StallNs: v.StallNs, WaitNs: v.WaitNs, PreemptedNs: v.PreemptedNs, Class: k.Class, Where: k.Where,
		})
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("reading the counts of faults outside the model files: %w", err)
	}
	slices.SortFunc(out, func(a, b wire.FaultCountEvent) int {
		return cmp.Or(cmp.Compare(a.Hdr.Ts, b.Hdr.Ts), cmp.Compare(a.Hdr.Tid, b.Hdr.Tid), cmp.Compare(a.Class, b.Class), cmp.Compare(a.Where, b.Where))
	})
	return out, nil
}
