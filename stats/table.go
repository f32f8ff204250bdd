// Package stats computes the figures an SSD- or MoE-offloading study
// publishes from one recorded run: per-token I/O distributions by phase,
// read amplification, page-cache residency and refaults per tensor,
// routing statistics and expert-cache simulations (LRU, LFU, Belady) beside
// the run's own hit rate. It reads a built store (package store) and the
// run metadata; rendering is the caller's: every result is a Table whose
// column names carry their unit (…_bytes, …_ns, …_ratio), so that JSON
// keys and Parquet columns say what they count.
package stats

import "math"

// Kind is a column's value type.
type Kind uint8

const (
	String Kind = iota
	Int
	Float
)

// Column is one column of a Table.
type Column struct {
	Name string
	Kind Kind
	// NoneBelowZero: a negative Int is none (a tensor of no layer, a first
	// pick of no earlier one), not a number: null for programs, "-" for a
	// person, and no NA, since nothing went unmeasured.
	NoneBelowZero bool
	// NoneIfEmpty: an empty String is none (a note a row has not): null
	// for programs, as NoneBelowZero's.
	NoneIfEmpty bool
}

// IsNone says whether v, of column c, is none (NoneBelowZero,
// NoneIfEmpty).
func (c *Column) IsNone(v Value) bool {
	if v.NA != "" {
		return false
	}
	return c.NoneBelowZero && v.I < 0 || c.NoneIfEmpty && c.Kind == String && v.S == ""
}

// Value is one cell. NA, when set, says why the figure was not measured:
// an unmeasured figure is never a zero.
type Value struct {
	S  string
	I  int64
	F  float64
	NA string
}

// Str, I64 and F64 make cells; a NaN float becomes NA with reason.
func Str(s string) Value { return Value{S: s} }
func I64[T ~int | ~int64 | ~uint64 | ~uint32 | ~int32 | ~uint16 | ~int16](v T) Value {
	return Value{I: int64(v)}
}
func F64(v float64, reasonIfNaN string) Value {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return NA(reasonIfNaN)
	}
	return Value{F: v}
}
func NA(reason string) Value { return Value{NA: reason} }

// Table is one result: Name is its key in JSON and its file name in
// exports.
type Table struct {
	Name    string
	Title   string
	Columns []Column
	Rows    [][]Value
	// Long tables (a row per token × tensor) are for programs; a person's
	// table output leaves them out.
	Long bool
	// each, when set, makes the rows as they are read (Rows is then
	// empty): a Long table is too long to hold.
	each func(yield func([]Value) error) error
}

// Each calls fn with every row in order. The row is fn's only during the
// call: a table made as it is read reuses it.
func (t *Table) Each(fn func(row []Value) error) error {
	if t.each != nil {
		return t.each(fn)
	}
	for _, r := range t.Rows {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func (t *Table) add(row ...Value) {
	if len(row) != len(t.Columns) {
		panic("stats: internal: row of " + t.Name + " does not match its columns")
	}
	t.Rows = append(t.Rows, row)
}

// cols are columns of names, of kinds one letter each: s a string, i an
// integer, k an integer key whose negative values are none
// (NoneBelowZero), f a float.
func cols(kinds string, names ...string) []Column {
	out := make([]Column, len(names))
	for i, n := range names {
		switch kinds[i] {
		case 's':
			out[i] = Column{Name: n, Kind: String}
		case 'i':
			out[i] = Column{Name: n, Kind: Int}
		case 'k':
			out[i] = Column{Name: n, Kind: Int, NoneBelowZero: true}
		default:
			out[i] = Column{Name: n, Kind: Float}
		}
	}
	return out
}

// ratio is a ÷ b, NA with reason when b is 0.
func ratio(a, b float64, reason string) Value {
	if b == 0 {
		return NA(reason)
	}
	return Value{F: a / b}
}

// Col is the index of the column named name, -1 if the table has none:
// callers read figures by name, so a renamed column is found missing
// rather than read as another.
func (t *Table) Col(name string) int {
	for i, c := range t.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}
