package stats

import (
	"strings"

	"github.com/iocorr/iocorr/rundir"
)

// CounterFigure is one column computed from store counters: when the
// run did not measure one of them (rundir.Meta.CounterNA: a capability
// the kernel gave no path, or a probe tier without it), its cells are NA
// with that reason, never the zeros the store holds.
type CounterFigure struct {
	Table string
	// Column is a column name, or a prefix ending in "*".
	Column string
	// Row, when set, is the first cell of the only rows it applies to (the
	// real run's row beside simulated ones).
	Row      string
	Counters []string
}

// CounterFigures lists every stats figure that comes from a counter. The
// simulated expert caches, the routing and the residency are left out:
// they are computed from the picks, the tensors' sizes and the page cache,
// whose NA reasons stats gives itself.
var CounterFigures = []CounterFigure{
	{"per_token", "bytes_read_per_token_*", "", []string{"bytes_read"}},
	{"per_token", "bytes_requested_per_token_*", "", []string{"bytes_requested"}},
	{"per_token", "major_faults_per_token_*", "", []string{"major_faults"}},
	{"per_token", "fault_stall_per_token_*", "", []string{"fault_stall_ns"}},
	{"per_token", "stall_share_per_token_*", "", []string{"fault_stall_ns"}},
	{"per_token", "stall_share_ratio", "", []string{"fault_stall_ns"}},
	{"token_time", "compute_ns", "", []string{"fault_stall_ns"}},
	{"token_time", "stall_ns", "", []string{"fault_stall_ns"}},
	{"amplification", "bytes_read_bytes", "", []string{"bytes_read"}},
	{"amplification", "faulted_bytes", "", []string{"faults"}},
	{"amplification", "bytes_requested_bytes", "", []string{"bytes_requested"}},
	{"amplification", "readahead_amplification_ratio", "", []string{"bytes_read", "faults", "bytes_requested"}},
	{"amplification", "block_requests", "", []string{"block_requests"}},
	{"device_reads", "value", "", []string{"block_requests", "bytes_read"}},
	{"device_reads", "share_ratio", "", []string{"block_requests", "bytes_read"}},
	{"tensors", "bytes_read_bytes", "", []string{"bytes_read"}},
	{"tensors", "faults", "", []string{"faults"}},
	{"tensors", "major_faults", "", []string{"major_faults"}},
	{"tensors", "fault_stall_ns", "", []string{"fault_stall_ns"}},
	{"tensors", "faulted_bytes", "", []string{"faults"}},
	{"tensors", "readahead_amplification_ratio", "", []string{"bytes_read", "faults"}},
	{"tensors", "reread_amplification_ratio", "", []string{"bytes_read"}},
	{"layers", "bytes_read_bytes", "", []string{"bytes_read"}},
	{"layers", "reread_amplification_ratio", "", []string{"bytes_read"}},
	{"top_tensors", "bytes_read_bytes", "", []string{"bytes_read"}},
	{"top_tensors", "fault_stall_ns", "", []string{"fault_stall_ns"}},
	{"top_tensors", "faults", "", []string{"faults"}},
	{"cache_sim", "bytes_read_per_token_bytes", "real", []string{"bytes_read"}},
}

// counterNA makes NA every figure of rep computed from a counter the run
// did not measure. The default tier's refaults come from device reads
// (stats says so), so they follow bytes_read there.
func (rep *Report) counterNA(meta *rundir.Meta) {
	figs := CounterFigures
	if meta.PageCacheNA() != "" {
		figs = append(figs[:len(figs):len(figs)], CounterFigure{"tensors", "refault_pages", "", []string{"bytes_read"}})
	}
	for _, f := range figs {
		why := ""
		for _, c := range f.Counters {
			if why = meta.CounterNA(c); why != "" {
				break
			}
		}
		t := rep.Table(f.Table)
		if why == "" || t == nil {
			continue
		}
		for ci, col := range t.Columns {
			if !f.Matches(col.Name) {
				continue
			}
			for _, row := range t.Rows {
				if f.Row == "" || row[0].S == f.Row {
					row[ci] = NA(why)
				}
			}
		}
	}
}

// Matches says whether column col is one of f's.
func (f CounterFigure) Matches(col string) bool {
	if p, ok := strings.CutSuffix(f.Column, "*"); ok {
		return strings.HasPrefix(col, p)
	}
	return col == f.Column
}
