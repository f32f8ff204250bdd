package output

import (
	"bytes"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
)

func render(t *testing.T, format Format, status string, cols []Column, rows ...[]Cell) string {
	t.Helper()
	var b bytes.Buffer
	rw := New(&b, format, cols)
	rw.SetStatus(status)
	for _, r := range rows {
		if err := rw.Row(r...); err != nil {
			t.Fatal(err)
		}
	}
	if err := rw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// Each format that has a place for it beside the values says the run is
// partial, and spells an unmeasured number in its own way; none of them
// writes it as 0.
func TestEveryFormatSpellsNAAndTheRunStatusItsWay(t *testing.T) {
	cols := []Column{{Name: "token"}, {Name: "start_ns"}, {Name: "tensor"}}
	row := []Cell{Num(3), NA(), Text("blk.0,ffn")}
	const status = "incomplete run: the disk filled"
	tests := []struct {
		format Format
		status string
		want   string
	}{
		// RFC 4180 has no comments: a CSV reader takes the first line as
		// the header, so the status is the sidecar's and stderr's.
		{CSV, status, "token,start_ns,tensor\r\n3,,\"blk.0,ffn\"\r\n"},
		{CSV, "", "token,start_ns,tensor\r\n3,,\"blk.0,ffn\"\r\n"},
		{JSON, status, "[\n{\"token\":3,\"start_ns\":null,\"tensor\":\"blk.0,ffn\",\"run_status\":\"incomplete run: the disk filled\"}\n]\n"},
		{JSONL, "", "{\"token\":3,\"start_ns\":null,\"tensor\":\"blk.0,ffn\"}\n"},
		{Table, status, "TOKEN  START_NS  TENSOR     \n3      NA        blk.0,ffn  \n"},
	}
	for _, tc := range tests {
		t.Run(string(tc.format)+"/"+tc.status, func(t *testing.T) {
			if got := render(t, tc.format, tc.status, cols, row); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestATableShowsSizesAndTimesForPeopleAndTheOthersRawNumbers(t *testing.T) {
	cols := []Column{{Name: "bytes"}, {Name: "duration_ns"}, {Name: "layer"}, {Name: "ratio"}}
	row := []Cell{Bytes(1536), Duration(2_500_000), Num(-1), Float(1.0 / 3)}
	if got, want := render(t, Table, "", cols, row), "BYTES    DURATION_NS  LAYER  RATIO   \n1.5 KiB  2.5 ms       -1     0.3333  \n"; got != want {
		t.Errorf("table\n%q\nwant\n%q", got, want)
	}
	if got, want := render(t, CSV, "", cols, row), "bytes,duration_ns,layer,ratio\r\n1536,2500000,-1,0.3333333333333333\r\n"; got != want {
		t.Errorf("CSV\n%q\nwant\n%q", got, want)
	}
}

// Text that a CSV reader or a JSON parser would take for something else
// is quoted or escaped; in CSV every text cell is quoted, so that a reader
// that sniffs the quote character from the first rows finds it; bytes
// that are no UTF-8 are U+FFFD in both.
func TestTextIsQuotedWhereAReaderWouldMisreadIt(t *testing.T) {
	cols := []Column{{Name: "s"}}
	for _, tc := range []struct {
		in, csv, json string
	}{
		{"plain", `"plain"`, `"plain"`},
		{"read, completion unseen", `"read, completion unseen"`, `"read, completion unseen"`},
		{`say "hi"`, `"say ""hi"""`, `"say \"hi\""`},
		{"#not a comment", `"#not a comment"`, `"#not a comment"`},
		{" lead", `" lead"`, `" lead"`},
		{"two\nlines", "\"two\nlines\"", `"two\u000alines"`},
		{"bad \xff byte", "\"bad \uFFFD byte\"", "\"bad \uFFFD byte\""},
	} {
		if got := render(t, CSV, "", cols, []Cell{Text(tc.in)}); got != "s\r\n"+tc.csv+"\r\n" {
			t.Errorf("CSV of %q: %q, want %q", tc.in, got, tc.csv)
		}
		if got := render(t, JSONL, "", cols, []Cell{Text(tc.in)}); got != `{"s":`+tc.json+"}\n" {
			t.Errorf("JSON of %q: %q, want %q", tc.in, got, tc.json)
		}
	}
}

func TestAnEmptyResultIsAHeaderOrAnEmptyArray(t *testing.T) {
	cols := []Column{{Name: "token"}}
	for format, want := range map[Format]string{CSV: "token\r\n", JSON: "[]\n", JSONL: "", Table: "TOKEN  \n"} {
		if got := render(t, format, "", cols); got != want {
			t.Errorf("%s: %q, want %q", format, got, want)
		}
	}
}

func TestARowMustMatchTheColumns(t *testing.T) {
	for _, format := range []Format{Table, CSV, JSON, JSONL, Parquet} {
		var b bytes.Buffer
		if err := New(&b, format, []Column{{Name: "a"}, {Name: "b"}}).Row(Num(1)); err == nil {
			t.Errorf("%s: a row of 1 cell for 2 columns: no error", format)
		}
	}
}

func TestFileFormatAlsoTakesParquet(t *testing.T) {
	var f Format
	if err := f.Set("parquet"); err == nil {
		t.Errorf("--format parquet where no file is written: no error")
	}
	ff := FileFormat{Format: CSV}
	if err := ff.Set("parquet"); err != nil || ff.Format != Parquet {
		t.Errorf("FileFormat.Set(parquet): %v, %q", err, ff.Format)
	}
	if err := ff.Set("xml"); err == nil || err.Error() != `unknown format "xml" (want table, csv, json, jsonl or parquet)` {
		t.Errorf("FileFormat.Set(xml): %v", err)
	}
}

// A pseudo tensor's row of a query by layer (--all) keeps the key column
// an integer column: its layer is none, its name in pseudo_tensor, a
// column only such a result has.
func TestAPseudoTensorsLayerIsNoneAndItsNameAColumnOfItsOwnAndItHoldsNoDevice(t *testing.T) {
	// A layer's row names its weights' devices; a pseudo tensor's has none.
	rows := []store.Row{{Key: "[anonymous]"}, {Key: "-1", Devices: "CPU_Mapped"}, {Key: "0", Devices: "CPU_Mapped+Vulkan0"}}
	tests := []struct {
		name   string
		rows   []store.Row
		format Format
		want   string
	}{
		{"csv", rows, CSV, "layer,pseudo_tensor,devices,major_faults\r\n,\"[anonymous]\",,0\r\n,,\"CPU_Mapped\",0\r\n0,,\"CPU_Mapped+Vulkan0\",0\r\n"},
		{"jsonl", rows, JSONL, `{"layer":null,"pseudo_tensor":"[anonymous]","devices":null,"major_faults":0}` + "\n" +
			`{"layer":null,"pseudo_tensor":null,"devices":"CPU_Mapped","major_faults":0}` + "\n" + `{"layer":0,"pseudo_tensor":null,"devices":"CPU_Mapped+Vulkan0","major_faults":0}` + "\n"},
		{"table", rows, Table, "LAYER  PSEUDO_TENSOR  DEVICES             MAJOR_FAULTS  \n-      [anonymous]    -                   0             \n-      -              CPU_Mapped          0             \n0      -              CPU_Mapped+Vulkan0  0             \n"},
		{"no pseudo tensor, no column", rows[1:], CSV, "layer,devices,major_faults\r\n,\"CPU_Mapped\",0\r\n0,\"CPU_Mapped+Vulkan0\",0\r\n"},
	}
	// Only major_faults: the other counters are left out as unmeasured.
	na := &Unmeasured{Counters: CounterNA{}}
	for _, d := range event.CounterFields {
		if d.Name != "major_faults" {
			na.Counters[d.Name] = "not in this test"
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := QueryRows(&b, tc.rows, "layer", tc.format, "", na); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%q\nwant\n%q", b.String(), tc.want)
			}
		})
	}
}

// A query by request keeps its key an integer column, the llama.cpp
// sequence: a pseudo request's row ("shared", "[no decode]") has a null
// request and its name in pseudo_request, which a query by request always
// has, so that every run's result has one schema.
func TestARequestKeyIsTheSequenceAndAPseudoRequestsNameAColumnOfItsOwn(t *testing.T) {
	na := &Unmeasured{Counters: CounterNA{}}
	for _, d := range event.CounterFields {
		if d.Name != "major_faults" {
			na.Counters[d.Name] = "not in this test"
		}
	}
	for _, tc := range []struct {
		keys   []string
		format Format
		want   string
	}{
		{[]string{"0", "3", event.RequestShared, event.RequestNone}, CSV,
			"request,pseudo_request,major_faults\r\n0,,0\r\n3,,0\r\n,\"shared\",0\r\n,\"[no decode]\",0\r\n"},
		{[]string{"0", event.RequestUnknown}, JSONL,
			`{"request":0,"pseudo_request":null,"major_faults":0}` + "\n" + `{"request":null,"pseudo_request":"[unknown]","major_faults":0}` + "\n"},
		{[]string{"1"}, CSV, "request,pseudo_request,major_faults\r\n1,,0\r\n"},
	} {
		var rows []store.Row
		for _, k := range tc.keys {
			rows = append(rows, store.Row{Key: k})
		}
		var b bytes.Buffer
		if err := QueryRows(&b, rows, "request", tc.format, "", na); err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.want {
			t.Errorf("%v %s: got\n%q\nwant\n%q", tc.keys, tc.format, b.String(), tc.want)
		}
	}
}
