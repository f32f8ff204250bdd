package bpf

import "fmt"

// A probe tier is what a recording pays for: the default tier records
// faults with their file offsets, block requests, read calls, tokens,
// graphs and the router's picks; PageCache adds a record of every
// page-cache add and eviction of the model files. Those two tracepoints
// fire once per folio of every file on the machine, in the reading and the
// reclaiming task's path: under memory pressure they were ~90% of the BPF
// time and most of the tracer's cost, so they are asked for, not paid by
// default. Op and scheduler probes (Options.ProbeOps, ProbeSched) stay
// apart, as before.

// pageCacheTracepoints are the programs only the pagecache tier attaches,
// by tracepoint name.
var pageCacheTracepoints = map[string]bool{
	"mm_filemap_add_to_page_cache":      true,
	"mm_filemap_delete_from_page_cache": true,
}

// pagesNone is PAGES_NONE of pagecache.bpf.h: no page-cache records, and
// no run slots scanned on the fault and token paths.
const pagesNone = 3

// RecordsPageCache says whether the options ask for page-cache events:
// the pagecache tier, or a page-record mode other than the default runs
// (a test comparing runs with folios asks for them by that).
func (o *Options) RecordsPageCache() bool {
	return o.PageCache || o.PageRecords != PageRuns
}

// pageRecordsConst is page_records of pagecache.bpf.h for these options.
func (o *Options) pageRecordsConst() (uint32, error) {
	if o.PageRecords > PageRunsAndFolios {
		return 0, fmt.Errorf("page-record mode %d is not runs, folios or both", o.PageRecords)
	}
	if !o.RecordsPageCache() {
		return pagesNone, nil
	}
	return uint32(o.PageRecords), nil
}

// NotInTier is the error of a probe the chosen tier leaves off: the run's
// metadata lists it, so that every output can say why its figures are NA.
const NotInTier = "not attached: page-cache adds and evictions are recorded only in the pagecache tier (record --probe pagecache)"

// inTier says whether the kernel probe named name is attached with these
// options.
func (o *Options) inTier(name string) bool {
	return o.RecordsPageCache() || !pageCacheTracepoints[name]
}

// FilemapFaults counts the filemap faults (mm_filemap_fault) of traced
// processes, summed over every CPU: the kernel counts them instead of
// writing a record per fault, since a count is all anyone read of them.
func (t *Tracer) FilemapFaults() (uint64, error) {
	var per []uint64
	if err := t.objs.FilemapFaults.Lookup(uint32(0), &per); err != nil {
		return 0, fmt.Errorf("reading the filemap-fault counter: %w", err)
	}
	var sum uint64
	for _, v := range per {
		sum += v
	}
	return sum, nil
}
