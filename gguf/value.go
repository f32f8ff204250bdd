package gguf

import (
	"fmt"
	"math"
)

// ValueType is the type tag of a metadata value (gguf_type).
type ValueType uint32

const (
	ValueUint8   ValueType = 0
	ValueInt8    ValueType = 1
	ValueUint16  ValueType = 2
	ValueInt16   ValueType = 3
	ValueUint32  ValueType = 4
	ValueInt32   ValueType = 5
	ValueFloat32 ValueType = 6
	ValueBool    ValueType = 7
	ValueString  ValueType = 8
	ValueArray   ValueType = 9
	ValueUint64  ValueType = 10
	ValueInt64   ValueType = 11
	ValueFloat64 ValueType = 12
)

var valueTypeNames = [...]string{"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32", "bool", "string", "array", "uint64", "int64", "float64"}

// valueSizes is the encoded size of fixed-size values; 0 for string and
// array, whose smallest encoding is 8 bytes (a length).
var valueSizes = [...]int64{1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8}

func (t ValueType) String() string {
	if int(t) < len(valueTypeNames) {
		return valueTypeNames[t]
	}
	return fmt.Sprintf("value_type(%d)", uint32(t))
}

// Valid reports whether t is a known value type.
func (t ValueType) Valid() bool { return int(t) < len(valueTypeNames) }

// minEncodedSize is the fewest bytes one value of type t occupies, used
// to bound counts by the bytes left in the file.
func (t ValueType) minEncodedSize() int64 {
	switch t {
	case ValueString:
		return 8 // the length
	case ValueArray:
		return 4 + 8 // element type and count
	}
	return valueSizes[t]
}

// Array is a metadata array. Values holds a slice of the Go type that
// matches Elem: []uint8, []int8, []uint16, []int16, []uint32, []int32,
// []float32, []bool, []string, []uint64, []int64, []float64, or []Array
// for arrays of arrays.
type Array struct {
	Elem   ValueType
	Values any
}

// Len is the number of elements.
func (a Array) Len() int {
	switch v := a.Values.(type) {
	case []uint8:
		return len(v)
	case []int8:
		return len(v)
	case []uint16:
		return len(v)
	case []int16:
		return len(v)
	case []uint32:
		return len(v)
	case []int32:
		return len(v)
	case []float32:
		return len(v)
	case []bool:
		return len(v)
	case []string:
		return len(v)
	case []uint64:
		return len(v)
	case []int64:
		return len(v)
	case []float64:
		return len(v)
	case []Array:
		return len(v)
	}
	return 0
}

// KV is one metadata entry. Value holds uint8, int8, uint16, int16,
// uint32, int32, float32, bool, string, uint64, int64, float64 or Array,
// matching the GGUF type one to one, so that a file read and written
// again keeps its types.
type KV struct {
	Key   string
	Value any
}

// Type is the GGUF type of the value, or false for a Go type GGUF cannot
// hold.
func (kv KV) Type() (ValueType, bool) { return valueTypeOf(kv.Value) }

func valueTypeOf(v any) (ValueType, bool) {
	switch v.(type) {
	case uint8:
		return ValueUint8, true
	case int8:
		return ValueInt8, true
	case uint16:
		return ValueUint16, true
	case int16:
		return ValueInt16, true
	case uint32:
		return ValueUint32, true
	case int32:
		return ValueInt32, true
	case float32:
		return ValueFloat32, true
	case bool:
		return ValueBool, true
	case string:
		return ValueString, true
	case Array:
		return ValueArray, true
	case uint64:
		return ValueUint64, true
	case int64:
		return ValueInt64, true
	case float64:
		return ValueFloat64, true
	}
	return 0, false
}

// Metadata is the ordered key/value section of a file.
type Metadata []KV

// Get returns the value stored under key.
func (m Metadata) Get(key string) (any, bool) {
	for i := range m {
		if m[i].Key == key {
			return m[i].Value, true
		}
	}
	return nil, false
}

// String returns a string value; false if absent or not a string.
func (m Metadata) String(key string) (string, bool) {
	v, _ := m.Get(key)
	s, ok := v.(string)
	return s, ok
}

// Int returns an integer value of any integer type, since writers
// disagree on widths (llama.block_count is uint32 in one converter and
// uint64 in another); false if absent, not an integer, or out of int64
// range.
func (m Metadata) Int(key string) (int64, bool) {
	v, _ := m.Get(key)
	return toInt(v)
}

func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case uint8:
		return int64(x), true
	case int8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case int16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case int32:
		return int64(x), true
	case uint64:
		if x > math.MaxInt64 {
			return 0, false
		}
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

// Float returns a numeric value as float64; false if absent or not a
// number.
func (m Metadata) Float(key string) (float64, bool) {
	v, _ := m.Get(key)
	switch x := v.(type) {
	case float32:
		return float64(x), true
	case float64:
		return x, true
	}
	i, ok := toInt(v)
	return float64(i), ok
}

// Bool returns a bool value; false if absent or not a bool.
func (m Metadata) Bool(key string) (value, ok bool) {
	v, _ := m.Get(key)
	value, ok = v.(bool)
	return value, ok
}

// Array returns an array value; false if absent or not an array.
func (m Metadata) Array(key string) (Array, bool) {
	v, _ := m.Get(key)
	a, ok := v.(Array)
	return a, ok
}

// FormatValue renders a value for people, shortening long arrays.
func FormatValue(v any) string {
	switch x := v.(type) {
	case string:
		if len(x) > 80 {
			return fmt.Sprintf("%q…(%d bytes)", x[:77], len(x))
		}
		return fmt.Sprintf("%q", x)
	case Array:
		n := x.Len()
		if n > 8 {
			return fmt.Sprintf("[%s × %d]", x.Elem, n)
		}
		return fmt.Sprint(x.Values)
	}
	return fmt.Sprint(v)
}
