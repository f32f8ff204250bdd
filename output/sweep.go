package output

import (
	"fmt"
	"io"

	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/sweep"
)

// sweepFigure is one float figure of a sweep row: its column (the key of
// sweep.Row.NA) and value, nil when NA.
type sweepFigure struct {
	name string
	v    func(r *sweep.Row) *float64
}

var sweepFigures = []sweepFigure{
	{"tokens_per_s", func(r *sweep.Row) *float64 { return r.TokensPerS }},
	{"untraced_tokens_per_s", func(r *sweep.Row) *float64 { return r.UntracedTokensPerS }},
	{"reported_tokens_per_s", func(r *sweep.Row) *float64 { return r.ReportedTokensPerS }},
	{"bytes_read_per_token", func(r *sweep.Row) *float64 { return r.BytesPerToken }},
	{"major_faults_per_token", func(r *sweep.Row) *float64 { return r.MajorPerToken }},
	{"stall_share", func(r *sweep.Row) *float64 { return r.StallShare }},
	{"expert_hit_rate", func(r *sweep.Row) *float64 { return r.ExpertHitRate }},
}

// sweepTable is a sweep's summary as a table, the columns of sweep.json's
// rows: a figure not measured is NA with the row's reason.
func sweepTable(rows []sweep.Row) *stats.Table {
	t := &stats.Table{Name: "sweep", Columns: []stats.Column{{Name: "budget"}, {Name: "mem_limit_bytes", Kind: stats.Int},
		{Name: "status"}, {Name: "exit_code", Kind: stats.Int}, {Name: "run_dir"}, {Name: "decode_tokens", Kind: stats.Int},
		{Name: "decode_wall_ns", Kind: stats.Int}, {Name: "decode_bytes_read", Kind: stats.Int},
		{Name: "decode_major_faults", Kind: stats.Int}, {Name: "decode_fault_stall_ns", Kind: stats.Int}}}
	for _, f := range sweepFigures {
		t.Columns = append(t.Columns, stats.Column{Name: f.name, Kind: stats.Float})
	}
	for i := range rows {
		r := &rows[i]
		row := []stats.Value{stats.Str(r.Budget), stats.I64(r.MemLimit), stats.Str(r.Status), stats.I64(r.ExitCode),
			stats.Str(r.RunDir), stats.I64(r.Decode), stats.I64(r.DecodeNS), stats.I64(r.ReadBytes), stats.I64(r.Major), stats.I64(r.StallNS)}
		for _, f := range sweepFigures {
			switch v, why := f.v(r), r.NA[f.name]; {
			case v != nil:
				row = append(row, stats.Value{F: *v})
			case why == "":
				// sweep.Summarize names every NA figure's reason; a
				// summary written by hand may not.
				row = append(row, stats.NA("not in the sweep's summary"))
			default:
				row = append(row, stats.NA(why))
			}
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// SweepRows writes a sweep's summary, a row per budget, with the columns
// of sweep.json's rows in every format, every column kept. A figure not
// measured is null, its reason in na (the sidecar's, said once on
// stderr), or, where the runs' reasons differ, in a <figure>_na_reason
// column beside it.
// A table, for a person, ends with the reasons, one line each.
func SweepRows(w io.Writer, format Format, rows []sweep.Row) error {
	na, err := SweepExport(w, format, rows)
	if err != nil || format != Table {
		return err
	}
	for _, n := range na.Notes("") {
		if _, err := fmt.Fprintf(w, "NA: %s\n", n); err != nil {
			return err
		}
	}
	return nil
}

// SweepExport is SweepRows, saying what is NA and why.
func SweepExport(w io.Writer, format Format, rows []sweep.Row) (na TableNA, err error) {
	return StatsTable(w, format, "", sweepTable(rows), true)
}
