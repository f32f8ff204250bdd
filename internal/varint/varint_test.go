package varint

import (
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func TestReaderReadsWhatEncodingBinaryAppends(t *testing.T) {
	var b []byte
	b = binary.AppendUvarint(b, math.MaxUint64)
	b = binary.AppendVarint(b, -300)
	b = append(b, 7)
	b = binary.AppendUvarint(b, 5)
	b = append(b, "tensor"...)
	r := Reader{B: b}
	u, i, c, s := r.Uvarint(), r.Varint(), r.Byte(), r.String()
	if u != math.MaxUint64 || i != -300 || c != 7 || s != "tenso" || r.Err != nil {
		t.Fatalf("read %d %d %d %q, err %v", u, i, c, s, r.Err)
	}
	if len(r.B) != 1 {
		t.Fatalf("%d bytes left, want 1", len(r.B))
	}
}

func TestReaderKeepsTheFirstErrorAndReadsNothingAfter(t *testing.T) {
	tests := []struct {
		name string
		b    []byte
		read func(r *Reader)
	}{
		{"uvarint cut short", []byte{0x80}, func(r *Reader) { r.Uvarint() }},
		{"varint cut short", []byte{0xff, 0xff}, func(r *Reader) { r.Varint() }},
		{"uvarint overflows", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, func(r *Reader) { r.Uvarint() }},
		{"no byte", nil, func(r *Reader) { r.Byte() }},
		{"string longer than what is left", []byte{3, 'a', 'b'}, func(r *Reader) { _ = r.String() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := Reader{B: tc.b}
			tc.read(&r)
			if !errors.Is(r.Err, ErrShort) {
				t.Fatalf("err %v, want ErrShort", r.Err)
			}
			if r.Uvarint() != 0 || r.Byte() != 0 || r.String() != "" || !errors.Is(r.Err, ErrShort) {
				t.Fatal("a read after the error returned something")
			}
		})
	}
}
