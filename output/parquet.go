package output

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"

	"github.com/klauspost/compress/zstd"
	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/format"
)

// Version is the iocorr version a Parquet file names as its writer
// (created_by); the command sets it from its own.
var Version = "dev"

// parquetRowGroupRows bounds a row group: the writer holds one row
// group's pages in memory, so an export of millions of events streams in
// groups of this many rows (and readers split their work by them).
var parquetRowGroupRows int64 = 1 << 17

// parquetWriter writes rows as one Parquet file: zstd-compressed,
// dictionary-encoded strings, NA as null in nullable columns, and the run
// status as the file's key-value metadata "run_status".
type parquetWriter struct {
	w    *parquet.GenericWriter[any]
	cols []Column
	row  parquet.Row
	// status is what SetStatus said; "complete" when it said nothing.
	status string
	na     []naNote
}

func newParquetWriter(w io.Writer, cols []Column) *parquetWriter {
	schema := parquet.NewSchema("iocorr", orderedGroup(cols))
	return &parquetWriter{
		w: parquet.NewGenericWriter[any](w, schema, parquet.Compression(&pageZstd{}),
			parquet.MaxRowsPerRowGroup(parquetRowGroupRows), parquet.CreatedBy("iocorr", Version, "")),
		cols:   cols,
		row:    make(parquet.Row, len(cols)),
		status: "complete",
	}
}

// pageZstd is Parquet's ZSTD codec with one encoder of a 1 MiB window.
// parquet-go's own keeps encoders of zstd's default 8 MiB window in a
// pool the collector empties, so an export re-made them, tens of MB
// each time, and its peak grew with the rows; a page is far smaller than
// the window, so the frames are the same standard zstd, compressed alike.
type pageZstd struct {
	mu  sync.Mutex
	enc *zstd.Encoder
	dec *zstd.Decoder
}

func (*pageZstd) String() string                            { return "ZSTD" }
func (*pageZstd) CompressionCodec() format.CompressionCodec { return format.Zstd }

func (z *pageZstd) Encode(dst, src []byte) ([]byte, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.enc == nil {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20),
			zstd.WithZeroFrames(true), zstd.WithEncoderCRC(false))
		if err != nil {
			return nil, fmt.Errorf("parquet: zstd: %w", err)
		}
		z.enc = enc
	}
	return z.enc.EncodeAll(src, dst[:0]), nil
}

func (z *pageZstd) Decode(dst, src []byte) ([]byte, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.dec == nil {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("parquet: zstd: %w", err)
		}
		z.dec = dec
	}
	return z.dec.DecodeAll(src, dst[:0])
}

// parquetGroup is a group whose columns keep the export's order (a
// parquet.Group sorts them by name).
type parquetGroup struct {
	parquet.Group
	fields []parquet.Field
}

func (g parquetGroup) Fields() []parquet.Field { return g.fields }

func orderedGroup(cols []Column) parquetGroup {
	g := parquet.Group{}
	for _, c := range cols {
		var n parquet.Node
		switch c.Type {
		case String:
			n = parquet.Encoded(parquet.String(), &parquet.RLEDictionary)
		case Uint32:
			n = parquet.Uint(32)
		case Uint64:
			n = parquet.Uint(64)
		case Int32:
			n = parquet.Int(32)
		case Float64:
			n = parquet.Leaf(parquet.DoubleType)
		case Time:
			n = parquet.Timestamp(parquet.Microsecond)
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

func (pw *parquetWriter) SetNA(col, reason string) { pw.na = append(pw.na, naNote{col, reason}) }

func (pw *parquetWriter) Row(cells ...Cell) error {
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
func parquetValue(c *Cell, col *Column) (parquet.Value, error) {
	if c.empty {
		if !col.Nullable {
			return parquet.Value{}, fmt.Errorf("internal: column %s is never NA", col.Name)
		}
		return parquet.NullValue(), nil
	}
	if col.Type == Float64 {
		// A float cell is its shortest exact decimal (Float), so
		// parsing it back gives the very value.
		f, err := strconv.ParseFloat(c.s, 64)
		if c.kind != 'f' || err != nil {
			return parquet.Value{}, fmt.Errorf("internal: column %s holds floats, not %q", col.Name, c.human())
		}
		return parquet.DoubleValue(f), nil
	}
	if col.Type == String {
		if c.kind != 's' {
			return parquet.Value{}, fmt.Errorf("internal: column %s holds text", col.Name)
		}
		return parquet.ByteArrayValue([]byte(c.s)), nil
	}
	if c.kind == 's' || c.kind == 'f' {
		return parquet.Value{}, fmt.Errorf("internal: column %s holds integers", col.Name)
	}
	neg := c.kind == 'i' && c.n < 0
	var lo, hi int64 // the range of signed columns
	switch col.Type {
	case Uint32:
		if neg || c.u > 1<<32-1 {
			return parquet.Value{}, fmt.Errorf("column %s: %s out of range", col.Name, c.human())
		}
		return parquet.Int32Value(int32(uint32(c.u))), nil
	case Uint64:
		if neg {
			return parquet.Value{}, fmt.Errorf("column %s: %s out of range", col.Name, c.human())
		}
		return parquet.Int64Value(int64(c.u)), nil
	case Int32:
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
	if col.Type == Int32 {
		return parquet.Int32Value(int32(v)), nil
	}
	return parquet.Int64Value(v), nil
}

func (pw *parquetWriter) Close() error {
	pw.w.SetKeyValueMetadata("run_status", pw.status)
	for _, n := range pw.na {
		pw.w.SetKeyValueMetadata(naKey(n.col), n.reason)
	}
	return pw.w.Close()
}
