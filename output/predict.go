package output

import (
	"io"

	"github.com/iocorr/iocorr/predict"
	"github.com/iocorr/iocorr/stats"
)

// predictionTable is a prediction as a table: a row per budget, policy
// and phase; a figure not predicted is NA with its reason.
func predictionTable(res *predict.Result) *stats.Table {
	t := &stats.Table{Name: "predict", Columns: []stats.Column{{Name: "budget_bytes", Kind: stats.Int}, {Name: "policy"}, {Name: "mode"}, {Name: "phase"}}}
	for _, c := range predict.Figures {
		k := stats.Float
		if c == predict.ColBytes || c == predict.ColStall {
			k = stats.Int
		}
		t.Columns = append(t.Columns, stats.Column{Name: c, Kind: k})
	}
	t.Columns = append(t.Columns, stats.Column{Name: "readahead_bytes", Kind: stats.Int}, stats.Column{Name: "disk_read_ahead_bytes", Kind: stats.Int},
		stats.Column{Name: "non_file_bytes", Kind: stats.Int}, stats.Column{Name: "note", Kind: stats.String, NoneIfEmpty: true})
	disk := stats.NA("the run did not record its disk's read_ahead_kb")
	if res.DiskReadAheadBytes != nil {
		disk = stats.I64(*res.DiskReadAheadBytes)
	}
	for _, r := range res.Rows {
		row := []stats.Value{stats.I64(r.BudgetBytes), stats.Str(r.Policy), stats.Str(r.Mode), stats.Str(r.Phase)}
		for i, v := range []float64{r.BytesReadPerToken, r.MajorFaultsPerToken, r.StallNSPerToken, r.TokensPerS} {
			switch why, na := r.NA[predict.Figures[i]]; {
			case na:
				row = append(row, stats.NA(why))
			case t.Columns[4+i].Kind == stats.Int:
				row = append(row, stats.I64(int64(v)))
			default:
				row = append(row, stats.Value{F: v})
			}
		}
		t.Rows = append(t.Rows, append(row, stats.I64(res.ReadaheadBytes), disk, stats.I64(res.NonFileBytes), stats.Str(r.Note)))
	}
	return t
}

// Prediction writes a prediction's rows, every column kept: a figure not
// predicted is null, its reason in na (for the caller's note on stderr),
// or, where the rows' reasons differ, in a <figure>_na_reason column
// beside it.
func Prediction(w io.Writer, res *predict.Result, format Format, status string) (na TableNA, err error) {
	return StatsTable(w, format, status, predictionTable(res), true)
}
