package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// dequantize decodes the values of whole blocks of type t, as ggml's
// dequantize_row_* does: what synth's tests and its own calibration read
// back from the bytes it writes.
func dequantize(t Type, b []byte) ([]float32, error) {
	bs, ts := t.BlockSize(), t.TypeSize()
	if ts == 0 || int64(len(b))%ts != 0 {
		return nil, fmt.Errorf("gguf: dequantize %s: %d bytes is no whole number of %d-byte blocks", t, len(b), ts)
	}
	out := make([]float32, 0, int64(len(b))/ts*bs)
	for i := int64(0); i < int64(len(b)); i += ts {
		blk := b[i : i+ts]
		switch t {
		case TypeF32:
			out = append(out, math.Float32frombits(binary.LittleEndian.Uint32(blk)))
		case TypeF16:
			out = append(out, float16ToFloat32(binary.LittleEndian.Uint16(blk)))
		case TypeBF16:
			out = append(out, math.Float32frombits(uint32(binary.LittleEndian.Uint16(blk))<<16))
		case TypeQ8_0:
			d := float16ToFloat32(binary.LittleEndian.Uint16(blk))
			for _, q := range blk[2:] {
				out = append(out, d*float32(int8(q)))
			}
		default:
			return nil, fmt.Errorf("gguf: dequantize: %s is not a type synth writes", t)
		}
	}
	return out, nil
}
