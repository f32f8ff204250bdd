package output

import (
	"bytes"
	"math"
	"testing"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/event"
)

// diffResult is a comparison by layer: one layer in both runs (bytes
// read grew, stall halved), one only in A.
func diffResult() *diff.Result {
	return &diff.Result{By: "layer", Counters: []string{"bytes_read", "fault_stall_ns"}, StatusB: "incomplete run: killed",
		OnlyA: []string{"blk.1.attn_q.weight"},
		Groups: []diff.Group{
			{Key: "0", In: diff.Both, Cells: []diff.Cell{
				{Counter: "bytes_read", Unit: event.UnitBytes, A: diff.Side{V: 1024}, B: diff.Side{V: 3072}, Delta: 2048, Ratio: 3},
				{Counter: "fault_stall_ns", Unit: event.UnitNS, A: diff.Side{V: 2_000_000}, B: diff.Side{V: 1_000_000}, Delta: -1_000_000, Ratio: 0.5}}},
			{Key: "1", In: diff.OnlyA, Cells: []diff.Cell{
				{Counter: "bytes_read", Unit: event.UnitBytes, A: diff.Side{V: 0}, B: diff.Side{NA: "no layer 1"}, DeltaNA: "run B: no layer 1", RatioNA: "run B: no layer 1"},
				{Counter: "fault_stall_ns", Unit: event.UnitNS, A: diff.Side{V: 0}, B: diff.Side{NA: "no layer 1"}, DeltaNA: "run B: no layer 1", RatioNA: "run B: no layer 1"}}},
		}}
}

func TestDiffPrintsARowPerGroupAndCounterWithNAAndItsReasonInEveryFormat(t *testing.T) {
	tests := []struct {
		format Format
		want   string
	}{
		{Table, "LAYER  IN    COUNTER         A        B        DELTA     RATIO  \n" +
			"0      both  bytes_read      1.0 KiB  3.0 KiB  +2.0 KiB  3      \n" +
			"0      both  fault_stall_ns  2.0 ms   1.0 ms   -1.0 ms   0.5    \n" +
			"1      a     bytes_read      0 B      NA       NA        NA     \n" +
			"1      a     fault_stall_ns  0 ns     NA       NA        NA     \n" +
			"NA: run B: no layer 1\n" +
			"only in run A: 1 tensors: blk.1.attn_q.weight\n"},
		{CSV, "layer,in,counter,a,b,delta,ratio,na_reason\r\n" +
			"0,\"both\",\"bytes_read\",1024,3072,2048,3.0,\r\n0,\"both\",\"fault_stall_ns\",2000000,1000000,-1000000,0.5,\r\n" +
			"1,\"a\",\"bytes_read\",0,,,,\"run B: no layer 1\"\r\n1,\"a\",\"fault_stall_ns\",0,,,,\"run B: no layer 1\"\r\n"},
		{JSONL, `{"layer":0,"in":"both","counter":"bytes_read","a":1024,"b":3072,"delta":2048,"ratio":3.0,"na_reason":null,"run_status":"run B: incomplete run: killed"}` + "\n" +
			`{"layer":0,"in":"both","counter":"fault_stall_ns","a":2000000,"b":1000000,"delta":-1000000,"ratio":0.5,"na_reason":null,"run_status":"run B: incomplete run: killed"}` + "\n" +
			`{"layer":1,"in":"a","counter":"bytes_read","a":0,"b":null,"delta":null,"ratio":null,"na_reason":"run B: no layer 1","run_status":"run B: incomplete run: killed"}` + "\n" +
			`{"layer":1,"in":"a","counter":"fault_stall_ns","a":0,"b":null,"delta":null,"ratio":null,"na_reason":"run B: no layer 1","run_status":"run B: incomplete run: killed"}` + "\n"},
	}
	for _, tc := range tests {
		t.Run(string(tc.format), func(t *testing.T) {
			var b bytes.Buffer
			if err := Diff(&b, diffResult(), tc.format); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got\n%s\nwant\n%s", b.String(), tc.want)
			}
		})
	}
}

// A Float cell of a Float64 column is a number to a JSON reader, as the
// integers are; NaN and infinities, which JSON has no number for, stay
// strings.
func TestFloatColumnsAreJSONNumbers(t *testing.T) {
	cols := []Column{{Name: "ratio", Type: Float64, Nullable: true}}
	for _, tc := range []struct {
		cell Cell
		want string
	}{
		{Float(0.25), `{"ratio":0.25}`},
		{Float(1e-30), `{"ratio":1e-30}`},
		{NA(), `{"ratio":null}`},
		{Float(math.Inf(1)), `{"ratio":"+Inf"}`},
	} {
		if got := render(t, JSONL, "", cols, []Cell{tc.cell}); got != tc.want+"\n" {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}
