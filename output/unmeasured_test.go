package output

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/testkit/ducktest"
)

// A counter the run's tier did not measure is left out of a table unless
// asked for; asked for, it is NA in every row, and only Parquet carries
// why inside the file (its metadata): the rows never do.
func TestAnUnmeasuredCounterIsLeftOutOrNAWithItsReasonBesideTheRows(t *testing.T) {
	const why = "not measured: the default tier"
	c := event.Counters{Faults: 7, PagesAdded: 9}
	render := func(format Format, u *Unmeasured) string {
		cols := CounterColumns([]Column{{Name: "token", Type: Uint32}}, true, u)
		row := CounterCells([]Cell{Num(1)}, &c, true, u)
		var b bytes.Buffer
		rw := New(&b, format, cols)
		NoteNA(rw, u)
		if err := rw.Row(row...); err != nil {
			t.Fatal(err)
		}
		if err := rw.Close(); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	left := &Unmeasured{Counters: CounterNA{"pages_added": why}}
	kept := &Unmeasured{Counters: CounterNA{"pages_added": why}, All: true}
	tests := []struct {
		name   string
		format Format
		u      *Unmeasured
		want   string
	}{
		{"csv left out", CSV, left, "token,faults,major_faults,minor_faults,fault_stall_ns,readahead_trigger_bytes,pages_evicted,bytes_read,block_requests,bytes_requested\r\n1,7,0,0,0,0,0,0,0,0\r\n"},
		{"csv kept", CSV, kept, "token,faults,major_faults,minor_faults,fault_stall_ns,pages_added,readahead_trigger_bytes,pages_evicted,bytes_read,block_requests,bytes_requested\r\n1,7,0,0,0,,0,0,0,0,0\r\n"},
		{"jsonl kept", JSONL, kept, `{"token":1,"faults":7,"major_faults":0,"minor_faults":0,"fault_stall_ns":0,"pages_added":null,"readahead_trigger_bytes":0,"pages_evicted":0,"bytes_read":0,"block_requests":0,"bytes_requested":0}` + "\n"},
		{"table kept", Table, kept, "TOKEN  FAULTS  MAJOR_FAULTS  MINOR_FAULTS  FAULT_STALL_NS  PAGES_ADDED  READAHEAD_TRIGGER_BYTES  PAGES_EVICTED  BYTES_READ  BLOCK_REQUESTS  BYTES_REQUESTED  \n1      7       0             0             0 ns            NA           0 B                      0              0 B         0               0 B              \n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := render(tc.format, tc.u); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		u    *Unmeasured
		want string
	}{
		{left, "pages_added left out (--all-columns keeps them, NA): " + why},
		{kept, "pages_added NA: " + why},
	} {
		if got := tc.u.Notes(); len(got) != 1 || got[0] != tc.want {
			t.Errorf("notes %q, want one: %q", got, tc.want)
		}
	}
	// Parquet: the column is null and the file's metadata says why.
	cols := CounterColumns([]Column{{Name: "token", Type: Uint32}}, true, kept)
	var buf bytes.Buffer
	pw := New(&buf, Parquet, cols)
	NoteNA(pw, kept)
	if err := pw.Row(CounterCells([]Cell{Num(1)}, &c, true, kept)...); err != nil {
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
	if err := ducktest.Open(t).QueryRow(fmt.Sprintf(`SELECT count(*) FILTER (pages_added IS NULL), sum(faults) FROM '%s'`, path)).Scan(&nulls, &faults); err != nil {
		t.Fatal(err)
	}
	var reason string
	if err := ducktest.Open(t).QueryRow(fmt.Sprintf(`SELECT decode(value) FROM parquet_kv_metadata('%s') WHERE decode(key) = 'pages_added_na_reason'`, path)).Scan(&reason); err != nil {
		t.Fatal(err)
	}
	if nulls != 1 || faults != 7 || reason != why {
		t.Errorf("parquet: %d nulls, faults %d, reason %q; want 1 null, 7 faults, %q", nulls, faults, reason, why)
	}
}

// A layer or an expert is an integer key; none (-1) is null to a program
// and "-" to a person, never the text "-1".
func TestLayerAndExpertKeysAreIntegersAndNullForNone(t *testing.T) {
	cols := []Column{{Name: "layer", Type: Int32, Nullable: true}}
	for _, tc := range []struct {
		format Format
		want   string
	}{
		{CSV, "layer\r\n3\r\n\r\n"},
		{JSONL, "{\"layer\":3}\n{\"layer\":null}\n"},
		{Table, "LAYER  \n3      \n-      \n"},
	} {
		var b bytes.Buffer
		rw := New(&b, tc.format, cols)
		for _, k := range []string{"3", "-1"} {
			key, _ := Key(k)
			if err := rw.Row(key); err != nil {
				t.Fatal(err)
			}
		}
		if err := rw.Close(); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("%s: got %q, want %q", tc.format, b.String(), tc.want)
		}
	}
	if got := SidecarPath("out/faults-per-token.csv"); got != "out/faults-per-token.na.json" {
		t.Errorf("sidecar of out/faults-per-token.csv: %s", got)
	}
	if got := SidecarPath("./x"); !strings.HasSuffix(got, "x.na.json") {
		t.Errorf("sidecar of ./x: %s", got)
	}
}

// A stats figure NA in every row for one reason is left out of a stats
// export unless all; a figure NA for one reason is null, its reason
// beside the rows (TableNA: the sidecar, the note); only a figure whose
// reasons differ by row has a reason column, null where it is measured.
func TestAStatsColumnNAInEveryRowIsLeftOutUnlessAllAndAReasonColumnOnlyWhereReasonsDiffer(t *testing.T) {
	const tier = "not measured: the default tier"
	tbl := &stats.Table{Name: "amp", Columns: []stats.Column{{Name: "layer", Kind: stats.Int}, {Name: "readahead_ratio", Kind: stats.Float},
		{Name: "reread_ratio", Kind: stats.Float}, {Name: "miss_ratio", Kind: stats.Float}}, Rows: [][]stats.Value{
		{{I: 0}, stats.NA(tier), {F: 1.5}, stats.NA("no reads")},
		{{I: 1}, stats.NA(tier), stats.NA("no reads"), stats.NA("no faults")},
		{{I: 2}, stats.NA(tier), {F: 0}, {F: 0.5}},
	}}
	for _, tc := range []struct {
		format Format
		all    bool
		want   string
		na     TableNA
	}{
		{CSV, false, "layer,reread_ratio,miss_ratio,miss_ratio_na_reason\r\n0,1.5,,\"no reads\"\r\n1,,,\"no faults\"\r\n2,0.0,0.5,\r\n",
			TableNA{Every: map[string]string{"readahead_ratio": tier}, LeftOut: []string{"readahead_ratio"}, Some: map[string]string{"reread_ratio": "no reads"}, PerRow: []string{"miss_ratio"}}},
		{CSV, true, "layer,readahead_ratio,reread_ratio,miss_ratio,miss_ratio_na_reason\r\n0,,1.5,,\"no reads\"\r\n1,,,,\"no faults\"\r\n2,,0.0,0.5,\r\n",
			TableNA{Every: map[string]string{"readahead_ratio": tier}, LeftOut: []string{}, Some: map[string]string{"reread_ratio": "no reads"}, PerRow: []string{"miss_ratio"}}},
		{JSONL, false, `{"layer":0,"reread_ratio":1.5,"miss_ratio":null,"miss_ratio_na_reason":"no reads"}` + "\n" +
			`{"layer":1,"reread_ratio":null,"miss_ratio":null,"miss_ratio_na_reason":"no faults"}` + "\n" +
			`{"layer":2,"reread_ratio":0.0,"miss_ratio":0.5,"miss_ratio_na_reason":null}` + "\n",
			TableNA{Every: map[string]string{"readahead_ratio": tier}, LeftOut: []string{"readahead_ratio"}, Some: map[string]string{"reread_ratio": "no reads"}, PerRow: []string{"miss_ratio"}}},
	} {
		var b bytes.Buffer
		na, err := StatsTable(&b, tc.format, "", tbl, tc.all)
		if err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want || fmt.Sprint(na) != fmt.Sprint(tc.na) {
			t.Errorf("%s all %v: got\n%q, %v\nwant\n%q, %v", tc.format, tc.all, b.String(), na, tc.want, tc.na)
		}
	}
	side := (&TableNA{Every: map[string]string{"readahead_ratio": tier}, LeftOut: []string{"readahead_ratio"},
		Some: map[string]string{"reread_ratio": "no reads"}, PerRow: []string{"miss_ratio"}}).Sidecar("run", "")
	if side.NA["readahead_ratio"] != tier || side.SomeRowsNA["reread_ratio"] != "no reads" || !strings.Contains(side.SomeRowsNA["miss_ratio"], "miss_ratio_na_reason") {
		t.Errorf("sidecar %+v", side)
	}
}

// A stats key that is none (a tensor of no layer, a first pick of no
// earlier one) is null in an export, "-" to a person, and is no NA: no
// reason anywhere, since nothing went unmeasured.
func TestAStatsKeyOfNoneIsNullWithNoReason(t *testing.T) {
	tbl := &stats.Table{Name: "layers", Columns: []stats.Column{{Name: "layer", Kind: stats.Int, NoneBelowZero: true}, {Name: "size_bytes", Kind: stats.Int}},
		Rows: [][]stats.Value{{{I: -1}, {I: 10}}, {{I: 0}, {I: 20}}}}
	for _, tc := range []struct {
		format Format
		want   string
	}{
		{CSV, "layer,size_bytes\r\n,10\r\n0,20\r\n"},
		{JSONL, "{\"layer\":null,\"size_bytes\":10}\n{\"layer\":0,\"size_bytes\":20}\n"},
	} {
		var b bytes.Buffer
		na, err := StatsTable(&b, tc.format, "", tbl, false)
		if err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want || len(na.Every)+len(na.Some)+len(na.PerRow) != 0 {
			t.Errorf("%s: got %q, NA %+v; want %q and no NA", tc.format, b.String(), na, tc.want)
		}
	}
	if c := statsCell(tbl.Columns[0], tbl.Rows[0][0]); c.human() != "-" {
		t.Errorf("a person sees layer none as %q, want -", c.human())
	}
}
