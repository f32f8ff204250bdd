package output

import (
	"encoding/json"
	"io"
	"sort"
	"strings"

	"github.com/iocorr/iocorr/sweep"
)

// sweepColumns are a sweep summary's columns, in every format; the JSON
// formats carry sweep.Row as in sweep.json.
var sweepColumns = []Column{{"budget", String, false}, {"mem_limit_bytes", Int64, false}, {"status", String, false},
	{"exit_code", Int32, false}, {"decode_tokens", Uint64, false}, {"tokens_per_s", Float64, true},
	{"untraced_tokens_per_s", Float64, true}, {"reported_tokens_per_s", Float64, true}, {"bytes_read_per_token", Float64, true}, {"major_faults_per_token", Float64, true}, {"stall_share", Float64, true},
	{"expert_hit_rate", Float64, true}, {"na", String, false}, {"run_dir", String, false}}

// SweepRows writes a sweep's summary, a row per budget.
func SweepRows(w io.Writer, format Format, rows []sweep.Row) error {
	if format == JSON || format == JSONL {
		enc := json.NewEncoder(w)
		if format == JSON {
			enc.SetIndent("", "  ")
			return enc.Encode(rows)
		}
		for i := range rows {
			if err := enc.Encode(&rows[i]); err != nil {
				return err
			}
		}
		return nil
	}
	rw := New(w, format, sweepColumns)
	fl := func(v *float64) Cell {
		if v == nil {
			return NA()
		}
		return Float(*v)
	}
	for _, r := range rows {
		if err := rw.Row(Text(r.Budget), Num(r.MemLimit), Text(r.Status), Num(r.ExitCode), Num(r.Decode), fl(r.TokensPerS),
			fl(r.UntracedTokensPerS), fl(r.ReportedTokensPerS), fl(r.BytesPerToken), fl(r.MajorPerToken), fl(r.StallShare), fl(r.ExpertHitRate), Text(naText(r.NA)), Text(r.RunDir)); err != nil {
			return err
		}
	}
	return rw.Close()
}

// naText lists why figures are NA, one "figure: reason" each, in name
// order.
func naText(na map[string]string) string {
	var parts []string
	for k, v := range na {
		parts = append(parts, k+": "+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
