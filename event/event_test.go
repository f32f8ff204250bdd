package event

import "testing"

func TestReadCallKindsAreNamedAndUnknownOnesSaySo(t *testing.T) {
	tests := []struct {
		kind uint8
		want string
	}{
		{ReadRead, "read"}, {ReadPread64, "pread64"}, {ReadReadv, "readv"}, {ReadPreadv, "preadv"},
		{ReadPreadv2, "preadv2"}, {ReadIOUring, "io_uring read"}, {0, "read call"}, {7, "read call"}, {255, "read call"},
	}
	for _, tc := range tests {
		if got := ReadKindName(tc.kind); got != tc.want {
			t.Errorf("ReadKindName(%d) = %q, want %q", tc.kind, got, tc.want)
		}
	}
}

func TestMarkKindsAreNamed(t *testing.T) {
	tests := []struct {
		kind MarkKind
		want string
	}{
		{MarkThread, "thread"}, {MarkExec, "exec"}, {MarkDecodeBegin, "decode_begin"}, {MarkDecodeEnd, "decode_end"},
		{MarkGraph, "graph"}, {MarkOp, "op"}, {MarkSwitch, "switch"}, {MarkWakeup, "wakeup"}, {MarkEnd, "end"}, {0, "mark0"}, {10, "mark10"},
	}
	for _, tc := range tests {
		if got := tc.kind.String(); got != tc.want {
			t.Errorf("MarkKind(%d) = %q, want %q", tc.kind, got, tc.want)
		}
	}
}
