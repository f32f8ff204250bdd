package output

import (
	"io"

	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

// DiskProfile writes what `doctor --disk` measured: a row per queue
// depth and read size, bandwidth in MB/s (10^6 bytes), how far its rounds
// were apart (DiskPoint.Spread) and the mean latency of one read, and on every row the machine's prefetch cost (the
// compute time a prefetcher's reads cost a command per byte) and its
// helper's pace (its own CPU time per byte it asks for).
func DiskProfile(w io.Writer, format Format, d *rundir.DiskProfile) error {
	t := &stats.Table{Name: "disk", Columns: []stats.Column{{Name: "device"}, {Name: "depth", Kind: stats.Int},
		{Name: "block_size_bytes", Kind: stats.Int}, {Name: "bandwidth_mb_per_s", Kind: stats.Float}, {Name: "bandwidth_spread", Kind: stats.Float}, {Name: "mean_latency_ns", Kind: stats.Float},
		{Name: "prefetch_compute_ns_per_byte", Kind: stats.Float}, {Name: "prefetch_ask_ns_per_byte", Kind: stats.Float}}}
	pc, why := d.Prefetch()
	cost, pace := stats.NA(why), stats.NA(why)
	if pc != nil {
		cost = stats.F64(pc.ComputeNSPerByte, "")
		pace = stats.F64(pc.AskNSPerByte, "")
		if pc.AskNSPerByte <= 0 {
			pace = stats.NA(rundir.NoPace)
		}
	}
	for _, p := range d.Points {
		t.Rows = append(t.Rows, []stats.Value{stats.Str(d.Device), stats.I64(p.Depth), stats.I64(p.BlockBytes),
			{F: p.BytesPerSec / 1e6}, spread(p), {F: p.MeanLatencyNs}, cost, pace})
	}
	_, err := StatsTable(w, format, "", t, true)
	return err
}

// spread is a point's rounds' spread, NA for a point of one round.
func spread(p rundir.DiskPoint) stats.Value {
	if len(p.RoundsBytesPerSec) < 2 {
		return stats.NA("measured in one round")
	}
	return stats.F64(p.Spread(), "")
}
