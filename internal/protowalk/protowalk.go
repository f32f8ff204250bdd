// Package protowalk walks the fields of one protobuf message in wire
// order, for the tests that decode iocorr's Perfetto traces without their
// generated types (the trace is written by hand in package perfetto).
package protowalk

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Fields calls fn for each field of the message b: v holds a
// length-delimited field's bytes, u a varint's or fixed64's value. A
// malformed field, or a wire type iocorr never writes (groups, fixed32),
// ends the walk with an error.
func Fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, u uint64)) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("bad tag: %w", protowire.ParseError(n))
		}
		b = b[n:]
		var v []byte
		var u uint64
		switch typ {
		case protowire.VarintType:
			u, n = protowire.ConsumeVarint(b)
		case protowire.Fixed64Type:
			u, n = protowire.ConsumeFixed64(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			return fmt.Errorf("field %d: wire type %d is not one iocorr writes", num, typ)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		fn(num, typ, v, u)
	}
	return nil
}
