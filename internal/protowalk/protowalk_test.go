package protowalk

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

func TestFieldsGivesEachFieldInWireOrderAndRefusesWhatIocorrNeverWrites(t *testing.T) {
	var msg []byte
	msg = protowire.AppendTag(msg, 1, protowire.VarintType)
	msg = protowire.AppendVarint(msg, 300)
	msg = protowire.AppendTag(msg, 2, protowire.BytesType)
	msg = protowire.AppendBytes(msg, []byte("name"))
	msg = protowire.AppendTag(msg, 3, protowire.Fixed64Type)
	msg = protowire.AppendFixed64(msg, 7)
	fixed32 := protowire.AppendFixed32(protowire.AppendTag(nil, 4, protowire.Fixed32Type), 1)
	for _, tc := range []struct {
		name string
		in   []byte
		want string
		err  string
	}{
		{"every kind iocorr writes", msg, "1:0:[]:300 2:2:[110 97 109 101]:0 3:1:[]:7 ", ""},
		{"empty message", nil, "", ""},
		{"a fixed32 field", fixed32, "", "wire type 5"},
		{"a cut length-delimited field", msg[:len(msg)-12], "1:0:[]:300 ", "field 2"},
		{"a bad tag", []byte{0x80}, "", "bad tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got strings.Builder
			err := Fields(tc.in, func(num protowire.Number, typ protowire.Type, v []byte, u uint64) {
				fmt.Fprintf(&got, "%d:%d:%v:%d ", num, typ, []byte(append([]byte{}, v...)), u)
			})
			if got.String() != tc.want || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("fields %q, error %v; want %q and an error with %q", got.String(), err, tc.want, tc.err)
			}
		})
	}
}
