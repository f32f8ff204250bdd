package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// A probe tier is what a recording pays for: the default tier records
// faults with their file offsets, block requests, read calls, tokens,
// graphs and the router's picks; PageCache adds a record of every
// page-cache add and eviction of the model files. Those two tracepoints
// fire once per folio of every file on the machine, in the reading and the
// reclaiming task's path: under memory pressure they were ~90% of the BPF
// time and most of the tracer's cost, so they are asked for, not paid by
// default. Op and scheduler probes (Options.Probes: Ops, Sched) stay
// apart, as before.

// pagesNone is PAGES_NONE of common.bpf.h: no page-cache records, and
// no run slots scanned on the fault and token paths.
const pagesNone = 3

// RecordsPageCache says whether the options ask for page-cache events:
// the pagecache tier, or a page-record mode other than the default runs
// (a test comparing runs with folios asks for them by that).
func (o *Options) RecordsPageCache() bool {
	return o.Probes.PageCache || o.PageRecords != PageRuns
}

// pageRecordsConst is cfg.page_records (common.bpf.h) for these options
// and the capabilities the kernel gave.
func (o *Options) pageRecordsConst(caps []capChoice) (uint32, error) {
	if o.PageRecords > PageRunsAndFolios {
		return 0, fmt.Errorf("page-record mode %d is not runs, folios or both", o.PageRecords)
	}
	if !o.RecordsPageCache() || !hasPath(caps, CapPageCache) {
		return pagesNone, nil
	}
	return uint32(pageRecords(caps, o.PageRecords)), nil
}

// hasPath says whether the capability named name took a path.
func hasPath(caps []capChoice, name string) bool {
	for _, c := range caps {
		if c.Name == name {
			return c.path != nil
		}
	}
	return false
}

// wanted says whether the run asks for capability c: the tier decides the
// page-cache programs and what is rebuilt from them (the readahead
// trigger is the adds inside each fault), options the op and sched probes;
// a prefetcher's own session (PrefetchOnly) only what it acts on.
func (o *Options) wanted(c *Capability) bool {
	if o.PrefetchOnly {
		switch c.Name {
		case CapLoops, CapProcesses, CapMappings, CapFaults, CapOffsets:
			return true
		}
		return false
	}
	switch c.Name {
	case CapOps:
		return o.Probes.Ops
	case CapSched:
		return o.Probes.Sched
	case CapPageCache, CapReadahead:
		return o.RecordsPageCache()
	}
	return true
}

// unwanted are the programs of taken paths that the run leaves out: a
// prefetcher's own session acts on major faults only (the prefetch
// package's OnFault), and the minor-fault event would run a program and
// send a record for each of the ~1,500 minor faults of a decode token
// (the demo MoE at 128 KiB of read-ahead), on the command's CPU and the
// reader's, for nothing.
func (o *Options) unwanted() []string {
	if o.PrefetchOnly {
		return []string{"fault_minor"}
	}
	return nil
}

// CountsFilemapFaults says whether the filemap_fault program is attached
// (the page cache's primary path, in the pagecache tier): without it the
// counter stays 0 without meaning none happened.
func (t *Tracer) CountsFilemapFaults() bool {
	return chosenPrimary(t.caps, CapPageCache)
}

// FilemapFaults counts the filemap faults (mm_filemap_fault) of traced
// processes, summed over every CPU: the kernel counts them instead of
// writing a record per fault, since a count is all anyone read of them.
func (t *Tracer) FilemapFaults() (uint64, error) {
	n, err := perCPUSum(t.objs.FilemapFaults, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the filemap-fault counter: %w", err)
	}
	return n, nil
}

// TokenStops is how many times the kernel stopped process tgid at a
// token's start (Options.StopAtTokens), and the token of the last stop:
// user space resumes it once per stop, at the token's record, which the
// kernel writes after the stop. A process never stopped has 0, 0.
func (t *Tracer) TokenStops(tgid uint32) (stops uint64, token uint32, err error) {
	var v IocorrTokenStop
	err = t.objs.TokenStops.Lookup(tgid, &v)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("reading the token stops of process %d: %w", tgid, err)
	}
	return v.Stops, v.Token, nil
}

// ArmTokenWakeup makes the next token start of any traced process wake
// the ring's reader at once (the residency snapshotter is ready for it),
// instead of waiting for the reader's next poll. The kernel disarms it
// at that token.
func (t *Tracer) ArmTokenWakeup() error {
	if err := t.objs.TokenWakeup.Update(uint32(0), uint32(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("arming the wakeup at the next token: %w", err)
	}
	return nil
}

// StopsUnheld counts the pauses not taken because the thread that asked
// for one was not under the warden yet (proc__stop): what ran in it
// before its uprobe attach finished was not held back.
func (t *Tracer) StopsUnheld() (uint64, error) {
	n, err := perCPUSum(t.objs.StopsUnheld, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the count of pauses not held: %w", err)
	}
	return n, nil
}

// StopsUnsent counts the pauses whose SIGSTOP the kernel refused to send
// (proc__sent): nothing held the process while their probes went on.
func (t *Tracer) StopsUnsent() (uint64, error) {
	n, err := perCPUSum(t.objs.StopsUnsent, 0)
	if err != nil {
		return 0, fmt.Errorf("reading the count of pauses not sent: %w", err)
	}
	return n, nil
}
