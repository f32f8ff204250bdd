package gguf

import (
	"fmt"
	"math"
	"strings"
)

// Type is a ggml tensor type, with ggml's enum values (enum ggml_type in
// ggml.h): these numbers are what GGUF files store.
type Type uint32

const (
	TypeF32     Type = 0
	TypeF16     Type = 1
	TypeQ4_0    Type = 2
	TypeQ4_1    Type = 3
	TypeQ5_0    Type = 6
	TypeQ5_1    Type = 7
	TypeQ8_0    Type = 8
	TypeQ8_1    Type = 9
	TypeQ2_K    Type = 10
	TypeQ3_K    Type = 11
	TypeQ4_K    Type = 12
	TypeQ5_K    Type = 13
	TypeQ6_K    Type = 14
	TypeQ8_K    Type = 15
	TypeIQ2_XXS Type = 16
	TypeIQ2_XS  Type = 17
	TypeIQ3_XXS Type = 18
	TypeIQ1_S   Type = 19
	TypeIQ4_NL  Type = 20
	TypeIQ3_S   Type = 21
	TypeIQ2_S   Type = 22
	TypeIQ4_XS  Type = 23
	TypeI8      Type = 24
	TypeI16     Type = 25
	TypeI32     Type = 26
	TypeI64     Type = 27
	TypeF64     Type = 28
	TypeIQ1_M   Type = 29
	TypeBF16    Type = 30
	TypeTQ1_0   Type = 34
	TypeTQ2_0   Type = 35
	TypeMXFP4   Type = 39
	TypeNVFP4   Type = 40
	TypeQ1_0    Type = 41
	TypeQ2_0    Type = 42
)

// typeTrait is ggml's type_traits entry reduced to what determines the
// on-disk size: elements per block and bytes per block.
type typeTrait struct {
	name    string
	blck    int64
	size    int64
	removed bool // enum value that once existed; ggml refuses it in GGUF files now
}

const qkK = 256 // QK_K, elements in a k-quant super-block

var typeTraits = [...]typeTrait{
	TypeF32:     {"F32", 1, 4, false},
	TypeF16:     {"F16", 1, 2, false},
	TypeQ4_0:    {"Q4_0", 32, 2 + 16, false},
	TypeQ4_1:    {"Q4_1", 32, 2 + 2 + 16, false},
	4:           {"Q4_2", 0, 0, true},
	5:           {"Q4_3", 0, 0, true},
	TypeQ5_0:    {"Q5_0", 32, 2 + 4 + 16, false},
	TypeQ5_1:    {"Q5_1", 32, 2 + 2 + 4 + 16, false},
	TypeQ8_0:    {"Q8_0", 32, 2 + 32, false},
	TypeQ8_1:    {"Q8_1", 32, 4 + 4 + 32, false},
	TypeQ2_K:    {"Q2_K", qkK, 2 + 2 + qkK/16 + qkK/4, false},
	TypeQ3_K:    {"Q3_K", qkK, 2 + qkK/4 + qkK/8 + 12, false},
	TypeQ4_K:    {"Q4_K", qkK, 2 + 2 + qkK/2 + 12, false},
	TypeQ5_K:    {"Q5_K", qkK, 2 + 2 + qkK/2 + qkK/8 + 12, false},
	TypeQ6_K:    {"Q6_K", qkK, 2 + qkK/2 + qkK/4 + qkK/16, false},
	TypeQ8_K:    {"Q8_K", qkK, 4 + qkK + qkK/8, false},
	TypeIQ2_XXS: {"IQ2_XXS", qkK, 2 + qkK/4, false},
	TypeIQ2_XS:  {"IQ2_XS", qkK, 2 + qkK/4 + qkK/32, false},
	TypeIQ3_XXS: {"IQ3_XXS", qkK, 2 + qkK/4 + qkK/8, false},
	TypeIQ1_S:   {"IQ1_S", qkK, 2 + qkK/8 + qkK/16, false},
	TypeIQ4_NL:  {"IQ4_NL", 32, 2 + 16, false},
	TypeIQ3_S:   {"IQ3_S", qkK, 2 + qkK/4 + qkK/8 + qkK/32 + 4, false},
	TypeIQ2_S:   {"IQ2_S", qkK, 2 + qkK/4 + qkK/16, false},
	TypeIQ4_XS:  {"IQ4_XS", qkK, 2 + 2 + qkK/2 + qkK/64, false},
	TypeI8:      {"I8", 1, 1, false},
	TypeI16:     {"I16", 1, 2, false},
	TypeI32:     {"I32", 1, 4, false},
	TypeI64:     {"I64", 1, 8, false},
	TypeF64:     {"F64", 1, 8, false},
	TypeIQ1_M:   {"IQ1_M", qkK, qkK/8 + qkK/16 + qkK/32, false},
	TypeBF16:    {"BF16", 1, 2, false},
	31:          {"Q4_0_4_4", 0, 0, true},
	32:          {"Q4_0_4_8", 0, 0, true},
	33:          {"Q4_0_8_8", 0, 0, true},
	TypeTQ1_0:   {"TQ1_0", qkK, 2 + 4*13, false},
	TypeTQ2_0:   {"TQ2_0", qkK, 2 + 64, false},
	36:          {"IQ4_NL_4_4", 0, 0, true},
	37:          {"IQ4_NL_4_8", 0, 0, true},
	38:          {"IQ4_NL_8_8", 0, 0, true},
	TypeMXFP4:   {"MXFP4", 32, 1 + 16, false},
	TypeNVFP4:   {"NVFP4", 64, 4 + 32, false},
	TypeQ1_0:    {"Q1_0", 128, 2 + 16, false},
	TypeQ2_0:    {"Q2_0", 64, 2 + 16, false},
}

func (t Type) trait() (typeTrait, bool) {
	if int(t) < len(typeTraits) {
		tt := typeTraits[t]
		return tt, tt.blck > 0
	}
	return typeTrait{}, false
}

// Valid reports whether files may use t: it is in ggml's current table.
func (t Type) Valid() bool {
	_, ok := t.trait()
	return ok
}

// String is ggml's name for the type ("Q8_0"), or "type(N)" for an id
// ggml does not know.
func (t Type) String() string {
	if int(t) < len(typeTraits) && typeTraits[t].name != "" {
		return typeTraits[t].name
	}
	return fmt.Sprintf("type(%d)", uint32(t))
}

// BlockSize is the number of elements in one block (1 for plain types);
// 0 for invalid types.
func (t Type) BlockSize() int64 {
	tt, _ := t.trait()
	return tt.blck
}

// TypeSize is the number of bytes of one block; 0 for invalid types.
func (t Type) TypeSize() int64 {
	tt, _ := t.trait()
	return tt.size
}

// Quantized reports whether t packs several elements into blocks.
func (t Type) Quantized() bool { return t.BlockSize() > 1 }

// RowSize is the number of bytes of ne elements, as ggml_row_size. It
// fails when ne is not a multiple of the block size, since ggml cannot
// represent a partial block.
func (t Type) RowSize(ne int64) (int64, error) {
	tt, ok := t.trait()
	if !ok {
		return 0, fmt.Errorf("%w %s", ErrUnknownType, t)
	}
	if ne < 0 || ne%tt.blck != 0 {
		return 0, fmt.Errorf("row of %d elements is not a multiple of %s's block size %d", ne, t, tt.blck)
	}
	if ne/tt.blck > math.MaxInt64/tt.size {
		return 0, fmt.Errorf("row of %d elements of %s overflows a 64-bit size", ne, t)
	}
	return ne / tt.blck * tt.size, nil
}

// ParseType looks a type up by its ggml name, case-insensitively
// ("q8_0", "F16").
func ParseType(name string) (Type, bool) {
	for i, tt := range typeTraits {
		if tt.blck > 0 && strings.EqualFold(tt.name, name) {
			return Type(i), true
		}
	}
	return 0, false
}

// Types lists every valid type in enum order.
func Types() []Type {
	var ts []Type
	for i, tt := range typeTraits {
		if tt.blck > 0 {
			ts = append(ts, Type(i))
		}
	}
	return ts
}
