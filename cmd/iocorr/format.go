package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/event"
)

// outputFormat is the --format flag shared by every subcommand that prints
// results: aligned tables for people; CSV (RFC 4180), a JSON array of
// objects and JSON lines (an object per line) for programs.
type outputFormat string

const (
	formatTable outputFormat = "table"
	formatCSV   outputFormat = "csv"
	formatJSON  outputFormat = "json"
	formatJSONL outputFormat = "jsonl"
)

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "table|csv|json|jsonl" }
func (f *outputFormat) Set(s string) error {
	switch outputFormat(s) {
	case formatTable, formatCSV, formatJSON, formatJSONL:
		*f = outputFormat(s)
		return nil
	}
	return fmt.Errorf("unknown format %q (want table, csv, json or jsonl)", s)
}

// formatFlag adds --format with default def.
func formatFlag(fs *pflag.FlagSet, def ...outputFormat) *outputFormat {
	f := formatTable
	if len(def) > 0 {
		f = def[0]
	}
	fs.Var(&f, "format", "output format: table, csv (RFC 4180), json (one array of objects) or jsonl (an object per line)")
	return &f
}

// column is one column of a result.
type column struct {
	Name string
}

// cell is one field of a row: text or a number, without boxing in an
// interface, so that a ten-million-event export does not allocate per
// field. CSV and JSON carry the raw value; a table renders sizes in
// KiB/MiB and times in µs/ms.
type cell struct {
	s     string
	n     int64
	u     uint64
	kind  byte // 's', 'i' or 'u'
	unit  event.Unit
	empty bool // a number that was not measured: NA in tables, empty in CSV, null in JSON
	// Human, when set, is what a table shows instead of the value.
	Human string
}

func txt(s string) cell { return cell{s: s, kind: 's'} }

// txtAs is text that a table shows as human.
func txtAs(s, human string) cell { return cell{s: s, kind: 's', Human: human} }
func num[T int | int16 | int64 | uint64 | uint32 | int32 | uint](v T) cell {
	if v < 0 {
		return cell{n: int64(v), kind: 'i'}
	}
	return cell{u: uint64(v), kind: 'u'}
}
func bytesCell(v uint64) cell { return cell{u: v, kind: 'u', unit: event.UnitBytes} }
func durCell(ns uint64) cell  { return cell{u: ns, kind: 'u', unit: event.UnitNS} }
func naCell() cell            { return cell{kind: 'u', empty: true} }

// counterCell is a counter's value, rendered in tables by its unit.
func counterCell(d *event.Counter, c *event.Counters) cell {
	return cell{u: *d.Field(c), kind: 'u', unit: d.Unit}
}

// counterColumns are the columns of every counter, by their names.
func counterColumns(dst []column, tableOnly bool) []column {
	for _, d := range event.CounterFields {
		if d.Table || !tableOnly {
			dst = append(dst, column{Name: d.Name})
		}
	}
	return dst
}

// counterCells appends c's counters in counterColumns order.
func counterCells(dst []cell, c *event.Counters, tableOnly bool) []cell {
	for i := range event.CounterFields {
		if d := &event.CounterFields[i]; d.Table || !tableOnly {
			dst = append(dst, counterCell(d, c))
		}
	}
	return dst
}

func (c *cell) human() string {
	switch {
	case c.Human != "":
		return c.Human
	case c.empty:
		return "NA"
	case c.kind == 's':
		return c.s
	case c.kind == 'i':
		return strconv.FormatInt(c.n, 10)
	case c.unit == event.UnitBytes:
		return humanBytes(c.u)
	case c.unit == event.UnitNS:
		return humanDuration(c.u)
	}
	return strconv.FormatUint(c.u, 10)
}

// appendRaw appends the raw value: na for an unmeasured number, text
// through quote, numbers in decimal.
func (c *cell) appendRaw(b []byte, na string, quote func([]byte, string) []byte) []byte {
	switch {
	case c.empty:
		return append(b, na...)
	case c.kind == 's':
		return quote(b, c.s)
	case c.kind == 'i':
		return strconv.AppendInt(b, c.n, 10)
	}
	return strconv.AppendUint(b, c.u, 10)
}

// resultWriter streams rows in one of the formats. The header is written
// with the first row (or at Close), after SetStatus.
type resultWriter struct {
	w       io.Writer
	format  outputFormat
	cols    []column
	status  string
	started bool
	tw      *tabwriter.Writer
	n       int
	buf     []byte
}

func newResultWriter(w io.Writer, format outputFormat, cols []column) *resultWriter {
	return &resultWriter{w: w, format: format, cols: cols}
}

// SetStatus marks the output as partial (rundir.Meta.Status): CSV gets it
// as a leading "# " comment line (pandas comment='#', duckdb comment='#',
// Go's csv.Reader Comment), JSON and JSON lines as a "run_status" field of
// every row, so that no row read alone passes for a whole run's. Tables
// leave it to the caller's warning on stderr.
func (rw *resultWriter) SetStatus(s string) { rw.status = s }

func (rw *resultWriter) start() error {
	if rw.started {
		return nil
	}
	rw.started = true
	b := rw.buf[:0]
	switch rw.format {
	case formatTable:
		rw.tw = tabwriter.NewWriter(rw.w, 0, 0, 2, ' ', 0)
		for _, c := range rw.cols {
			fmt.Fprint(rw.tw, strings.ToUpper(c.Name), "\t")
		}
		fmt.Fprintln(rw.tw)
		return nil
	case formatCSV:
		if rw.status != "" {
			b = append(b, "# "...)
			b = append(b, strings.ReplaceAll(rw.status, "\n", " ")...)
			b = append(b, '\r', '\n')
		}
		for i, c := range rw.cols {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendCSVField(b, c.Name)
		}
		b = append(b, '\r', '\n')
	case formatJSON:
		b = append(b, '[')
	}
	rw.buf = b
	_, err := rw.w.Write(b)
	return err
}

// Row writes one row; cells must match the columns.
func (rw *resultWriter) Row(cells ...cell) error {
	if len(cells) != len(rw.cols) {
		return fmt.Errorf("internal: row has %d cells, want %d", len(cells), len(rw.cols))
	}
	if err := rw.start(); err != nil {
		return err
	}
	rw.n++
	if rw.format == formatTable {
		for i := range cells {
			fmt.Fprint(rw.tw, cells[i].human(), "\t")
		}
		_, err := fmt.Fprintln(rw.tw)
		return err
	}
	b := rw.buf[:0]
	switch rw.format {
	case formatCSV:
		for i := range cells {
			if i > 0 {
				b = append(b, ',')
			}
			b = cells[i].appendRaw(b, "", appendCSVField)
		}
		b = append(b, '\r', '\n')
	default:
		if rw.format == formatJSON {
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
		if rw.format == formatJSONL {
			b = append(b, '\n')
		}
	}
	rw.buf = b
	_, err := rw.w.Write(b)
	return err
}

// Close ends the output (a table is aligned and written only here).
func (rw *resultWriter) Close() error {
	if err := rw.start(); err != nil {
		return err
	}
	switch rw.format {
	case formatTable:
		return rw.tw.Flush()
	case formatJSON:
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

func humanBytes(v uint64) string {
	const unit = 1024
	if v < unit {
		return fmt.Sprintf("%d B", v)
	}
	f := float64(v)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%.1f PiB", f/unit)
}

func humanDuration(ns uint64) string {
	switch {
	case ns < 1000:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1000_000:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	case ns < 1000_000_000:
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}
