package output

import (
	"bytes"
	"fmt"
	"os"
	"testing"

	"github.com/iocorr/iocorr/event"
)

// A counter the run's tier did not measure is NA in every row, and every
// format a program reads carries why, beside the rows.
func TestAnUnmeasuredCounterIsNAWithItsReasonInEveryFormat(t *testing.T) {
	na := CounterNA{"pages_added": "not measured: the default tier"}
	cols := CounterColumns([]Column{{Name: "token", Type: Uint32}}, true, na)
	c := event.Counters{Faults: 7, PagesAdded: 9}
	row := CounterCells([]Cell{Num(1)}, &c, true, na)
	render := func(format Format) string {
		var b bytes.Buffer
		rw := New(&b, format, cols)
		NoteNA(rw, na)
		if err := rw.Row(row...); err != nil {
			t.Fatal(err)
		}
		if err := rw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	tests := []struct {
		format Format
		want   string
	}{
		{CSV, "# pages_added NA: not measured: the default tier\r\ntoken,faults,major_faults,minor_faults,fault_stall_ns,pages_added,readahead_trigger_bytes,pages_evicted,bytes_read,block_requests,bytes_requested\r\n1,7,0,0,0,,0,0,0,0,0\r\n"},
		{JSONL, `{"token":1,"faults":7,"major_faults":0,"minor_faults":0,"fault_stall_ns":0,"pages_added":null,"readahead_trigger_bytes":0,"pages_evicted":0,"bytes_read":0,"block_requests":0,"bytes_requested":0,"pages_added_na_reason":"not measured: the default tier"}` + "\n"},
		{Table, "TOKEN  FAULTS  MAJOR_FAULTS  MINOR_FAULTS  FAULT_STALL_NS  PAGES_ADDED  READAHEAD_TRIGGER_BYTES  PAGES_EVICTED  BYTES_READ  BLOCK_REQUESTS  BYTES_REQUESTED  \n1      7       0             0             0 ns            NA           0 B                      0              0 B         0               0 B              \n"},
	}
	for _, tc := range tests {
		t.Run(string(tc.format), func(t *testing.T) {
			if got := render(tc.format); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	// Parquet: the column is null and the file's metadata says why.
	var buf bytes.Buffer
	pw := New(&buf, Parquet, cols)
	NoteNA(pw, na)
	if err := pw.Row(row...); err != nil {
		t.Fatal(err)
	}
	if err := pw.Close(); err != nil {
		t.Fatal(err)
	}
	path := t.TempDir() + "/na.parquet"
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var nulls, faults int64
	if err := duckDB(t).QueryRow(fmt.Sprintf(`SELECT count(*) FILTER (pages_added IS NULL), sum(faults) FROM '%s'`, path)).Scan(&nulls, &faults); err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := duckDB(t).QueryRow(fmt.Sprintf(`SELECT decode(value) FROM parquet_kv_metadata('%s') WHERE decode(key) = 'pages_added_na_reason'`, path)).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if nulls != 1 || faults != 7 || reason != na["pages_added"] {
		t.Errorf("parquet: %d nulls, faults %d, reason %q; want 1 null, 7 faults, %q", nulls, faults, reason, na["pages_added"])
	}
}
