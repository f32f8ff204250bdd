package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/parquet-go/parquet-go"
	"github.com/spf13/pflag"
)

// colType is a column's value type, for the outputs that keep types
// (Parquet); CSV and JSON write the same values as text and numbers.
type colType uint8

const (
	typString colType = iota
	typUint32
	typUint64
	typInt32
	typInt64
	// typFloat64 columns hold floatCell values.
	typFloat64
)

// typedColumn is one column of an export: its name (the same in every
// format), its type, and whether it can be NA (a null in Parquet, an empty
// CSV field, a JSON null) rather than always measured.
type typedColumn struct {
	Name     string
	Type     colType
	Nullable bool
}

// plainColumns are the columns the text formats need.
func plainColumns(cols []typedColumn) []column {
	out := make([]column, len(cols))
	for i, c := range cols {
		out[i] = column{Name: c.Name}
	}
	return out
}

// rowWriter is what an export writes its rows to: resultWriter for the
// text formats, parquetWriter for Parquet.
type rowWriter interface {
	SetStatus(string)
	Row(cells ...cell) error
	Close() error
}

// newRowWriter picks the writer for format.
func newRowWriter(w io.Writer, format outputFormat, cols []typedColumn) rowWriter {
	if format == formatParquet {
		return newParquetWriter(w, cols)
	}
	return newResultWriter(w, format, plainColumns(cols))
}

// formatParquet is accepted only where a file is written (export,
// sweep): it is binary.
const formatParquet outputFormat = "parquet"

// fileFormat is --format of the commands that also write Parquet.
type fileFormat struct{ outputFormat }

func (f *fileFormat) Type() string { return "table|csv|json|jsonl|parquet" }
func (f *fileFormat) Set(s string) error {
	if outputFormat(s) == formatParquet {
		f.outputFormat = formatParquet
		return nil
	}
	if err := f.outputFormat.Set(s); err != nil {
		return fmt.Errorf("unknown format %q (want table, csv, json, jsonl or parquet)", s)
	}
	return nil
}

func fileFormatFlag(fs *pflag.FlagSet, def outputFormat) *outputFormat {
	f := &fileFormat{def}
	fs.Var(f, "format", "output format: table, csv (RFC 4180), json (one array of objects), jsonl (an object per line) or parquet (binary: to a file)")
	return &f.outputFormat
}

// floatCell is a float for the text formats (its shortest exact decimal;
// a table shows 4 significant digits) and for typFloat64 columns.
func floatCell(v float64) cell {
	return txtAs(strconv.FormatFloat(v, 'g', -1, 64), strconv.FormatFloat(v, 'g', 4, 64))
}

// parquetRowGroupRows bounds a row group: the writer holds one row
// group's pages in memory, so an export of millions of events streams in
// groups of this many rows (and readers split their work by them).
var parquetRowGroupRows int64 = 1 << 17

// parquetWriter writes rows as one Parquet file: zstd-compressed,
// dictionary-encoded strings, NA as null in nullable columns, and the run
// status as the file's key-value metadata "run_status".
type parquetWriter struct {
	w    *parquet.Writer
	cols []typedColumn
	row  parquet.Row
	// status is what SetStatus said; "complete" when it said nothing.
	status string
}

func newParquetWriter(w io.Writer, cols []typedColumn) *parquetWriter {
	schema := parquet.NewSchema("iocorr", orderedGroup(cols))
	return &parquetWriter{
		w: parquet.NewWriter(w, schema, parquet.Compression(&parquet.Zstd),
			parquet.MaxRowsPerRowGroup(parquetRowGroupRows), parquet.CreatedBy("iocorr", version, "")),
		cols:   cols,
		row:    make(parquet.Row, len(cols)),
		status: "complete",
	}
}

// parquetGroup is a group whose columns keep the export's order (a
// parquet.Group sorts them by name).
type parquetGroup struct {
	parquet.Group
	fields []parquet.Field
}

func (g parquetGroup) Fields() []parquet.Field { return g.fields }

func orderedGroup(cols []typedColumn) parquetGroup {
	g := parquet.Group{}
	for _, c := range cols {
		var n parquet.Node
		switch c.Type {
		case typString:
			n = parquet.Encoded(parquet.String(), &parquet.RLEDictionary)
		case typUint32:
			n = parquet.Uint(32)
		case typUint64:
			n = parquet.Uint(64)
		case typInt32:
			n = parquet.Int(32)
		case typFloat64:
			n = parquet.Leaf(parquet.DoubleType)
		default:
			n = parquet.Int(64)
		}
		if c.Nullable {
			n = parquet.Optional(n)
		}
		g[c.Name] = n
	}
	fields := slices.Clone(g.Fields())
	order := map[string]int{}
	for i, c := range cols {
		order[c.Name] = i
	}
	slices.SortFunc(fields, func(a, b parquet.Field) int { return order[a.Name()] - order[b.Name()] })
	return parquetGroup{Group: g, fields: fields}
}

// SetStatus records why the run's figures are partial ("" when they are
// not) in the file's metadata, where readers see it beside the schema
// (DuckDB: parquet_kv_metadata, pyarrow: schema.metadata).
func (pw *parquetWriter) SetStatus(s string) {
	if s != "" {
		pw.status = s
	}
}

func (pw *parquetWriter) Row(cells ...cell) error {
	if len(cells) != len(pw.cols) {
		return fmt.Errorf("internal: row has %d cells, want %d", len(cells), len(pw.cols))
	}
	for i := range cells {
		v, err := parquetValue(&cells[i], &pw.cols[i])
		if err != nil {
			return err
		}
		def := 0
		if pw.cols[i].Nullable && !cells[i].empty {
			def = 1
		}
		pw.row[i] = v.Level(0, def, i)
	}
	_, err := pw.w.WriteRows([]parquet.Row{pw.row})
	return err
}

// parquetValue converts a cell to its column's type. A value that does
// not fit is an error, not a wrapped number.
func parquetValue(c *cell, col *typedColumn) (parquet.Value, error) {
	if c.empty {
		if !col.Nullable {
			return parquet.Value{}, fmt.Errorf("internal: column %s is never NA", col.Name)
		}
		return parquet.NullValue(), nil
	}
	if col.Type == typFloat64 {
		// A float cell is its shortest exact decimal (floatCell), so
		// parsing it back gives the very value.
		f, err := strconv.ParseFloat(c.s, 64)
		if c.kind != 's' || err != nil {
			return parquet.Value{}, fmt.Errorf("internal: column %s holds floats, not %q", col.Name, c.human())
		}
		return parquet.DoubleValue(f), nil
	}
	if col.Type == typString {
		if c.kind != 's' {
			return parquet.Value{}, fmt.Errorf("internal: column %s holds text", col.Name)
		}
		return parquet.ByteArrayValue([]byte(c.s)), nil
	}
	if c.kind == 's' {
		return parquet.Value{}, fmt.Errorf("internal: column %s holds numbers", col.Name)
	}
	neg := c.kind == 'i' && c.n < 0
	var lo, hi int64 // the range of signed columns
	switch col.Type {
	case typUint32:
		if neg || c.u > 1<<32-1 {
			return parquet.Value{}, fmt.Errorf("column %s: %s out of range", col.Name, c.human())
		}
		return parquet.Int32Value(int32(uint32(c.u))), nil
	case typUint64:
		if neg {
			return parquet.Value{}, fmt.Errorf("column %s: %s out of range", col.Name, c.human())
		}
		return parquet.Int64Value(int64(c.u)), nil
	case typInt32:
		lo, hi = -1<<31, 1<<31-1
	default:
		lo, hi = -1<<63, 1<<63-1
	}
	v := c.n
	if c.kind == 'u' {
		if c.u > uint64(hi) {
			return parquet.Value{}, fmt.Errorf("column %s: %s out of range", col.Name, c.human())
		}
		v = int64(c.u)
	}
	if v < lo || v > hi {
		return parquet.Value{}, fmt.Errorf("column %s: %s out of range", col.Name, c.human())
	}
	if col.Type == typInt32 {
		return parquet.Int32Value(int32(v)), nil
	}
	return parquet.Int64Value(v), nil
}

func (pw *parquetWriter) Close() error {
	pw.w.SetKeyValueMetadata("run_status", pw.status)
	return pw.w.Close()
}
