// Package output writes iocorr's result tables: aligned text for people;
// CSV (RFC 4180), a JSON array of objects, JSON lines (an object per line)
// and Parquet for programs. One engine serves every subcommand that prints
// rows (query, export, stats, sweep, doctor, inspect), so a column has the
// same name and an unmeasured figure the same spelling in every format.
//
// Every format loads with its readers' defaults (Python's csv and json,
// pandas, DuckDB's read_csv, read_json and read_parquet): CSV is RFC 4180,
// a header line then rows, with no comment lines; keys are typed (a layer,
// an expert, a token is an integer, null for none). An unmeasured number
// is NA in tables, an empty CSV field, a JSON null and a Parquet null,
// never a zero; why it is NA travels beside the rows (the command's note
// on stderr, the export's sidecar, Parquet's key-value metadata), never
// in them. A partial run says so in the formats that have a place for it
// outside the rows' values: a "run_status" field of every JSON row, the
// key-value metadata "run_status" of a Parquet file; CSV leaves it to the
// sidecar and stderr.
package output

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/units"
)

// Format is an output format; it is a pflag.Value for the text formats.
type Format string

const (
	Table Format = "table"
	CSV   Format = "csv"
	JSON  Format = "json"
	JSONL Format = "jsonl"
	// Parquet is accepted only where a file is written (export, sweep):
	// it is binary. FileFormat is the flag value that takes it.
	Parquet Format = "parquet"
	// ParquetSigned is Parquet with every integer column signed
	// (unsigned ones widened to INT64): the study dataset's, for the
	// engines without unsigned types (Spark, Trino, Hive), which read
	// UINT64 as decimal(20,0) or not at all. Not a flag value.
	ParquetSigned Format = "parquet-signed"
)

func (f *Format) String() string { return string(*f) }
func (f *Format) Type() string   { return "table|csv|json|jsonl" }
func (f *Format) Set(s string) error {
	switch Format(s) {
	case Table, CSV, JSON, JSONL:
		*f = Format(s)
		return nil
	}
	return fmt.Errorf("unknown format %q (want table, csv, json or jsonl)", s)
}

// FileFormat is the flag value of the commands that also write Parquet.
type FileFormat struct{ Format }

func (f *FileFormat) Type() string { return "table|csv|json|jsonl|parquet" }
func (f *FileFormat) Set(s string) error {
	if Format(s) == Parquet {
		f.Format = Parquet
		return nil
	}
	if err := f.Format.Set(s); err != nil {
		return fmt.Errorf("unknown format %q (want table, csv, json, jsonl or parquet)", s)
	}
	return nil
}

// Type is a column's value type, for the outputs that keep types
// (Parquet); CSV and JSON write the same values as text and numbers.
type Type uint8

const (
	String Type = iota
	Uint32
	Uint64
	Int32
	Int64
	// Float64 columns hold Float cells.
	Float64
	// Time columns hold microseconds since the Unix epoch (Num): a
	// Parquet timestamp (UTC), an integer in the text formats.
	Time
)

// Column is one column of a result: its name (the same in every format),
// its type, and whether it can be NA (a null in Parquet, an empty CSV
// field, a JSON null) rather than always measured. The text formats use
// the name only.
type Column struct {
	Name     string
	Type     Type
	Nullable bool
}

// Cell is one field of a row: text or a number, without boxing in an
// interface, so that a ten-million-event export does not allocate per
// field. CSV and JSON carry the raw value; a table renders sizes in
// KiB/MiB and times in µs/ms.
type Cell struct {
	s     string
	n     int64
	u     uint64
	kind  byte // 's', 'i', 'u' or 'f' (a float, its decimal in s)
	unit  event.Unit
	empty bool // a number that was not measured: NA in tables, empty in CSV, null in JSON
	// Human, when set, is what a table shows instead of the value.
	Human string
}

// Text is a text cell.
func Text(s string) Cell { return Cell{s: s, kind: 's'} }

// OptText is text that may be none (an op or device not known, a reason
// where there is none): null in the formats a program reads, an empty
// CSV field, "-" in a table. Its column is Nullable. An empty string
// would read as NULL from CSV but as an empty string from JSON and Parquet.
func OptText(s string) Cell {
	if s == "" {
		return None()
	}
	return Text(s)
}

// TextAs is text that a table shows as human.
func TextAs(s, human string) Cell { return Cell{s: s, kind: 's', Human: human} }

// Num is an integer cell.
func Num[T int | int16 | int64 | uint64 | uint32 | int32 | uint](v T) Cell {
	if v < 0 {
		return Cell{n: int64(v), kind: 'i'}
	}
	return Cell{u: uint64(v), kind: 'u'}
}

// Bytes is a byte count, which a table shows in KiB, MiB, ….
func Bytes(v uint64) Cell { return Cell{u: v, kind: 'u', unit: event.UnitBytes} }

// Duration is nanoseconds, which a table shows in µs, ms, ….
func Duration(ns uint64) Cell { return Cell{u: ns, kind: 'u', unit: event.UnitNS} }

// NA is a number that was not measured.
func NA() Cell { return Cell{kind: 'u', empty: true} }

// Float is a float for the text formats (its shortest exact decimal; a
// table shows 4 significant digits) and for Float64 columns. An integral
// value keeps a decimal point ("0.0", not "0"): a reader that types a
// column from its first rows (DuckDB sniffs 20,480) would otherwise take
// a column of zeros for an integer one and lose the fractions after.
func Float(v float64) Cell {
	s := strconv.FormatFloat(v, 'g', -1, 64)
	if !strings.ContainsAny(s, ".eNI") {
		s += ".0"
	}
	return Cell{s: s, kind: 'f', Human: strconv.FormatFloat(v, 'g', 4, 64)}
}

// Counter is a counter's value, rendered in tables by its unit.
func Counter(d *event.Counter, c *event.Counters) Cell {
	return Cell{u: *d.Field(c), kind: 'u', unit: d.Unit}
}

// CounterColumns appends every counter (event.CounterFields; with
// tableOnly those a table shows) as an unsigned 64-bit column named as
// the counter; a counter the run did not measure is left out, or with
// na.All kept as a nullable column.
func CounterColumns(dst []Column, tableOnly bool, na *Unmeasured) []Column {
	for _, d := range event.CounterFields {
		if d.Table || !tableOnly {
			if keep, unmeasured := na.keeps(d.Name); keep {
				dst = append(dst, Column{Name: d.Name, Type: Uint64, Nullable: unmeasured})
			}
		}
	}
	return dst
}

// CounterCells appends c's counters in CounterColumns order: NA for those
// the run did not measure.
func CounterCells(dst []Cell, c *event.Counters, tableOnly bool, na *Unmeasured) []Cell {
	for i := range event.CounterFields {
		if d := &event.CounterFields[i]; d.Table || !tableOnly {
			switch keep, unmeasured := na.keeps(d.Name); {
			case !keep:
			case unmeasured:
				dst = append(dst, NA())
			default:
				dst = append(dst, Counter(d, c))
			}
		}
	}
	return dst
}

// PseudoTensor is the column that names the pseudo tensor ([anonymous],
// [other file], [model header]) of a row grouped by layer or expert: a
// pseudo tensor has no layer, and its name in the key column would turn
// an integer column into text for every reader.
const PseudoTensor = "pseudo_tensor"

// PseudoRequest is the column that names the pseudo request (event's
// RequestShared, RequestUnknown, RequestIncomplete, RequestNone) of a
// row keyed by request, whose request (a llama.cpp sequence id) is then
// null: in the key column its name would turn the integer column into
// text for every reader.
const PseudoRequest = "pseudo_request"

// IntKey says whether a result grouped by by has an integer key that may
// be none (layer, expert, request), and names the column that says what
// a row of no key stands for (PseudoTensor, PseudoRequest).
func IntKey(by string) (ok bool, pseudo string) {
	switch by {
	case "layer", "expert":
		return true, PseudoTensor
	case "request":
		return true, PseudoRequest
	}
	return false, ""
}

// Key is a typed group key, a layer, an expert or a request: an integer, or, for
// none (-1: a tensor of no layer, a dense tensor), null in the formats a
// program reads and "-" in a table. A key that is no integer (a pseudo
// tensor's name) is none too, and pseudo its name, for the PseudoTensor
// column; pseudo is None for an integer key.
func Key(k string) (key, pseudo Cell) {
	n, err := strconv.ParseInt(k, 10, 32)
	switch {
	case err != nil:
		return None(), Text(k)
	case n < 0:
		return None(), None()
	}
	return Num(n), None()
}

// anyPseudo says whether a key of keys is no integer: whether a result
// grouped by layer or expert needs the PseudoTensor column. It is left
// out otherwise, so that a query without pseudo tensors (no --all) keeps
// the columns it had.
func anyPseudo(n int, key func(int) string) bool {
	for i := range n {
		if _, err := strconv.ParseInt(key(i), 10, 32); err != nil {
			return true
		}
	}
	return false
}

// None is a key that has no value (no layer, no expert): null, "-" in a
// table.
func None() Cell {
	c := NA()
	c.Human = "-"
	return c
}

// KeyOf is Key of an integer key.
func KeyOf[T int | int16 | int32](v T) Cell {
	if v < 0 {
		return None()
	}
	return Num(v)
}

func (c *Cell) human() string {
	switch {
	case c.Human != "":
		return c.Human
	case c.empty:
		return "NA"
	case c.kind == 's' || c.kind == 'f':
		return c.s
	case c.kind == 'i':
		return strconv.FormatInt(c.n, 10)
	case c.unit == event.UnitBytes:
		return units.Bytes(float64(c.u))
	case c.unit == event.UnitNS:
		return units.Duration(float64(c.u))
	}
	return strconv.FormatUint(c.u, 10)
}

// appendRaw appends the raw value: na for an unmeasured number, text
// through quote, numbers in decimal (NaN and ±Inf, which JSON has not,
// through quote too).
func (c *Cell) appendRaw(b []byte, na string, quote func([]byte, string) []byte) []byte {
	switch {
	case c.empty:
		return append(b, na...)
	case c.kind == 'f' && !strings.ContainsAny(c.s, "NI"):
		return append(b, c.s...)
	case c.kind == 's' || c.kind == 'f':
		return quote(b, c.s)
	case c.kind == 'i':
		return strconv.AppendInt(b, c.n, 10)
	}
	return strconv.AppendUint(b, c.u, 10)
}

// Writer streams the rows of one result.
type Writer interface {
	// SetStatus marks the output as partial (rundir.Meta.Status; "" for
	// a whole run). Call it before the first row.
	SetStatus(string)
	// SetNA says why column col is NA in every row (the run did not
	// measure it): key-value metadata "col_na_reason" in Parquet. The
	// text formats leave it to the caller's note on stderr and sidecar.
	// Call it before the first row.
	SetNA(col, reason string)
	// Row writes one row; the cells must match the columns.
	Row(cells ...Cell) error
	// Close ends the output.
	Close() error
}

// New returns the writer of format for rows of cols.
func New(w io.Writer, format Format, cols []Column) Writer {
	switch format {
	case Parquet:
		return newParquetWriter(w, cols)
	case ParquetSigned:
		signed := slices.Clone(cols)
		for i := range signed {
			if t := signed[i].Type; t == Uint32 || t == Uint64 {
				signed[i].Type = Int64
			}
		}
		return newParquetWriter(w, signed)
	}
	return &textWriter{w: w, format: format, cols: cols}
}

// textWriter writes the text formats. The header is written with the
// first row (or at Close), after SetStatus.
type textWriter struct {
	w       io.Writer
	format  Format
	cols    []Column
	status  string
	started bool
	tw      *tabwriter.Writer
	n       int
	buf     []byte
}

// SetStatus: JSON and JSON lines get the status as a "run_status" field
// of every row, so that no row read alone passes for a whole run's. CSV,
// whose readers take a first line as the header, and tables leave it to
// the caller's warning on stderr and sidecar.
func (rw *textWriter) SetStatus(s string) { rw.status = s }

// SetNA: the text formats carry no reasons in their rows.
func (rw *textWriter) SetNA(string, string) {}

func (rw *textWriter) start() error {
	if rw.started {
		return nil
	}
	rw.started = true
	b := rw.buf[:0]
	switch rw.format {
	case Table:
		rw.tw = tabwriter.NewWriter(rw.w, 0, 0, 2, ' ', 0)
		for _, c := range rw.cols {
			fmt.Fprint(rw.tw, strings.ToUpper(c.Name), "\t")
		}
		fmt.Fprintln(rw.tw)
		return nil
	case CSV:
		for i, c := range rw.cols {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCSVField(b, c.Name)
		}
		b = append(b, '\r', '\n')
	case JSON:
		b = append(b, '[')
	}
	rw.buf = b
	_, err := rw.w.Write(b)
	return err
}

func (rw *textWriter) Row(cells ...Cell) error {
	if len(cells) != len(rw.cols) {
		return fmt.Errorf("internal: row has %d cells, want %d", len(cells), len(rw.cols))
	}
	if err := rw.start(); err != nil {
		return err
	}
	rw.n++
	if rw.format == Table {
		for i := range cells {
			fmt.Fprint(rw.tw, cells[i].human(), "\t")
		}
		_, err := fmt.Fprintln(rw.tw)
		return err
	}
	b := rw.buf[:0]
	switch rw.format {
	case CSV:
		for i := range cells {
			if i > 0 {
				b = append(b, ',')
			}
			b = cells[i].appendRaw(b, "", appendCSVQuoted)
		}
		b = append(b, '\r', '\n')
	default:
		if rw.format == JSON {
			if rw.n > 1 {
				b = append(b, ',')
			}
			b = append(b, '\n')
		}
		b = append(b, '{')
		for i := range cells {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, rw.cols[i].Name)
			b = append(b, ':')
			b = cells[i].appendRaw(b, "null", appendJSONString)
		}
		if rw.status != "" {
			b = append(b, `,"run_status":`...)
			b = appendJSONString(b, rw.status)
		}
		b = append(b, '}')
		if rw.format == JSONL {
			b = append(b, '\n')
		}
	}
	rw.buf = b
	_, err := rw.w.Write(b)
	return err
}

// Close ends the output (a table is aligned and written only here).
func (rw *textWriter) Close() error {
	if err := rw.start(); err != nil {
		return err
	}
	switch rw.format {
	case Table:
		return rw.tw.Flush()
	case JSON:
		end := "\n]\n"
		if rw.n == 0 {
			end = "]\n"
		}
		_, err := io.WriteString(rw.w, end)
		return err
	}
	return nil
}

func appendCSVField(b []byte, s string) []byte {
	if !strings.ContainsAny(s, ",\"\r\n") && (s == "" || (s[0] != ' ' && s[0] != '\t' && s[0] != '#')) {
		return append(b, s...)
	}
	return appendCSVQuoted(b, s)
}

// appendCSVQuoted appends s quoted, as every text cell of a row is: a
// reader that sniffs the quote character from its first rows (DuckDB, in
// 20,480) finds it there, and does not break on a later cell that needs
// quotes (a comma in "read, completion unseen" at line 72,946 of a real
// run's events).
func appendCSVQuoted(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

func appendJSONString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}
