package gguf

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Quantized blocks synth writes. Layouts are ggml-common.h's block_q8_0,
// block_q4_K, block_q6_K and block_mxfp4 (llama.cpp of 2026-09); values
// are what ggml-quants.c's dequantize_row_* make of them. Each block has
// one fixed, finite scale and random quants, so every weight is small
// (|w| < 0.03) and of random sign, whatever the type: activations stay
// sane and llama.cpp computes finite logits. A test decodes the blocks
// with ggml's own to_float.

// q8Scale makes Q8_0 values d*q (q in -128..127) span about ±0.02.
var q8Scale = float32ToFloat16(0.02 / 128)

// Q4_K: x = d·sc·q − dmin·m per 32-element sub-block, q in 0..15. With
// sc = m = 16 and dmin = 7.5·d, x = d·16·(q − 7.5): ±0.019 for
// d·16 = 0.0025, and of mean zero (a mean would be a component every
// token shares, biasing each router).
const (
	q4kSc, q4kMin = 16, 16
	q4kOffD       = 0   // ggml_half d
	q4kOffDmin    = 2   // ggml_half dmin
	q4kOffScales  = 4   // uint8 scales[12]: 6-bit scales and mins
	q4kOffQs      = 16  // uint8 qs[128]: 4-bit quants
	q4kSize       = 144 // sizeof(block_q4_K)
)

var (
	q4kD    = float32ToFloat16(0.0025 / q4kSc)
	q4kDmin = float32ToFloat16(7.5 * float16ToFloat32(q4kD) * q4kSc / q4kMin)
	// q4kScales packs sc and m of all eight sub-blocks as
	// get_scale_min_k4 unpacks them.
	q4kScales = packScaleMinK4([8]uint8{q4kSc, q4kSc, q4kSc, q4kSc, q4kSc, q4kSc, q4kSc, q4kSc},
		[8]uint8{q4kMin, q4kMin, q4kMin, q4kMin, q4kMin, q4kMin, q4kMin, q4kMin})
)

// packScaleMinK4 is the inverse of ggml's get_scale_min_k4: sub-blocks
// 0–3 keep their 6-bit scale and min in bytes j and j+4; 4–7 put their
// low 4 bits in byte j+4 and their top 2 bits in the top bits of bytes
// j−4 (scale) and j (min).
func packScaleMinK4(sc, m [8]uint8) [12]byte {
	var q [12]byte
	for j := range 4 {
		q[j] = sc[j] & 63
		q[j+4] = m[j] & 63
	}
	for j := 4; j < 8; j++ {
		q[j+4] = sc[j]&0xf | (m[j]&0xf)<<4
		q[j-4] |= (sc[j] >> 4) << 6
		q[j] |= (m[j] >> 4) << 6
	}
	return q
}

func unpackScaleMinK4(j int, q []byte) (sc, m uint8) {
	if j < 4 {
		return q[j] & 63, q[j+4] & 63
	}
	return q[j+4]&0xf | (q[j-4]>>6)<<4, q[j+4]>>4 | (q[j]>>6)<<4
}

// Q6_K: x = d·sc·(q − 32) per 16-element sub-block, q 6 bits. sc = 4 and
// d·4·32 = 0.02.
const (
	q6kSc        = 4
	q6kOffQl     = 0   // uint8 ql[128]: low 4 bits
	q6kOffQh     = 128 // uint8 qh[64]: high 2 bits
	q6kOffScales = 192 // int8 scales[16]
	q6kOffD      = 208 // ggml_half d
	q6kSize      = 210
)

var q6kD = float32ToFloat16(0.02 / 32 / q6kSc)

// MXFP4: x = kvalues[q]·2^(e−128) (ggml_e8m0_to_fp32_half), q a 4-bit
// index into E2M1 values doubled (±12 at most). e = 119: |x| ≤ 0.023.
const (
	mxfp4E    = 119
	mxfp4Size = 17
)

var kvaluesMXFP4 = [16]int8{0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}

// fillBlocks writes random blocks of type t over b (whole blocks).
func fillBlocks(t Type, b []byte, r *rng) {
	r.fill(b)
	switch t {
	case TypeQ8_0:
		for i := 0; i+34 <= len(b); i += 34 {
			binary.LittleEndian.PutUint16(b[i:], q8Scale)
		}
	case TypeQ4_K:
		for i := 0; i+q4kSize <= len(b); i += q4kSize {
			binary.LittleEndian.PutUint16(b[i+q4kOffD:], q4kD)
			binary.LittleEndian.PutUint16(b[i+q4kOffDmin:], q4kDmin)
			copy(b[i+q4kOffScales:], q4kScales[:])
		}
	case TypeQ6_K:
		for i := 0; i+q6kSize <= len(b); i += q6kSize {
			for j := range 16 {
				b[i+q6kOffScales+j] = q6kSc
			}
			binary.LittleEndian.PutUint16(b[i+q6kOffD:], q6kD)
		}
	case TypeMXFP4:
		for i := 0; i+mxfp4Size <= len(b); i += mxfp4Size {
			b[i] = mxfp4E
		}
	}
}

// setElem0 sets the first element of the block at b as close to v as the
// block's fixed scale allows.
func setElem0(t Type, b []byte, v float32) {
	nearest := func(v, step float32, lo, hi int) int {
		return int(max(float64(lo), min(float64(hi), math.Round(float64(v/step)))))
	}
	switch t {
	case TypeF32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(v))
	case TypeF16:
		binary.LittleEndian.PutUint16(b, float32ToFloat16(v))
	case TypeBF16:
		binary.LittleEndian.PutUint16(b, uint16(math.Float32bits(v)>>16))
	case TypeQ8_0:
		d := float16ToFloat32(binary.LittleEndian.Uint16(b))
		b[2] = byte(int8(nearest(v, d, -127, 127)))
	case TypeQ4_K:
		step := float16ToFloat32(q4kD) * q4kSc // x ≈ step·(q − 7.5)
		q := nearest(v+step/2, step, -8, 7) + 8
		b[q4kOffQs] = b[q4kOffQs]&0xf0 | byte(q)
	case TypeQ6_K:
		step := float16ToFloat32(q6kD) * q6kSc // x = step·(q − 32)
		q := nearest(v, step, -32, 31) + 32
		b[q6kOffQl] = b[q6kOffQl]&0xf0 | byte(q&0xf)
		b[q6kOffQh] = b[q6kOffQh]&^3 | byte(q>>4)
	case TypeMXFP4:
		d := e8m0Half(b[0])
		best := 0
		for i, k := range kvaluesMXFP4 {
			if math.Abs(float64(float32(k)*d-v)) < math.Abs(float64(float32(kvaluesMXFP4[best])*d-v)) {
				best = i
			}
		}
		b[1] = b[1]&0xf0 | byte(best)
	}
}

// e8m0Half is ggml_e8m0_to_fp32_half: 2^(x−128), denormal below x = 2.
func e8m0Half(x uint8) float32 {
	if x < 2 {
		return math.Float32frombits(0x00200000 << x)
	}
	return math.Float32frombits(uint32(x-1) << 23)
}

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
		case TypeQ4_K:
			d := float16ToFloat32(binary.LittleEndian.Uint16(blk[q4kOffD:]))
			dmin := float16ToFloat32(binary.LittleEndian.Uint16(blk[q4kOffDmin:]))
			qs := blk[q4kOffQs:]
			for j := 0; j < 8; j += 2 {
				sc1, m1 := unpackScaleMinK4(j, blk[q4kOffScales:])
				sc2, m2 := unpackScaleMinK4(j+1, blk[q4kOffScales:])
				for l := range 32 {
					out = append(out, d*float32(sc1)*float32(qs[l]&0xf)-dmin*float32(m1))
				}
				for l := range 32 {
					out = append(out, d*float32(sc2)*float32(qs[l]>>4)-dmin*float32(m2))
				}
				qs = qs[32:]
			}
		case TypeQ6_K:
			d := float16ToFloat32(binary.LittleEndian.Uint16(blk[q6kOffD:]))
			ql, qh, sc := blk[q6kOffQl:q6kOffQh], blk[q6kOffQh:q6kOffScales], blk[q6kOffScales:q6kOffD]
			var y [256]float32
			for n := 0; n < 256; n += 128 {
				for l := range 32 {
					is := l / 16
					q1 := int8(ql[l]&0xf|(qh[l]&3)<<4) - 32
					q2 := int8(ql[l+32]&0xf|(qh[l]>>2&3)<<4) - 32
					q3 := int8(ql[l]>>4|(qh[l]>>4&3)<<4) - 32
					q4 := int8(ql[l+32]>>4|(qh[l]>>6&3)<<4) - 32
					y[n+l] = d * float32(int8(sc[is])) * float32(q1)
					y[n+l+32] = d * float32(int8(sc[is+2])) * float32(q2)
					y[n+l+64] = d * float32(int8(sc[is+4])) * float32(q3)
					y[n+l+96] = d * float32(int8(sc[is+6])) * float32(q4)
				}
				ql, qh, sc = ql[64:], qh[32:], sc[8:]
			}
			out = append(out, y[:]...)
		case TypeMXFP4:
			d := e8m0Half(blk[0])
			var y [32]float32
			for j, q := range blk[1:] {
				y[j] = float32(kvaluesMXFP4[q&0xf]) * d
				y[j+16] = float32(kvaluesMXFP4[q>>4]) * d
			}
			out = append(out, y[:]...)
		default:
			return nil, fmt.Errorf("gguf: dequantize: %s is not a type synth writes", t)
		}
	}
	return out, nil
}
