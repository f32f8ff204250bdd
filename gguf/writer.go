package gguf

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"math"
)

// TensorInfo describes a tensor for the Writer.
type TensorInfo struct {
	Name string
	Type Type
	Dims []int64 // ggml ne order, 1 to 4 entries
}

// Writer writes a GGUF file. Tensors are laid out in the order given,
// each at the next multiple of the alignment (general.alignment from
// Metadata, else DefaultAlignment), as llama.cpp's writer does.
type Writer struct {
	// Version is the GGUF version to write: 2 or 3; 0 means 3.
	Version  uint32
	Metadata Metadata
	Tensors  []TensorInfo
}

// DataFunc writes exactly t.Size bytes of tensor t's data to w. It is
// called once per tensor, in order, so data can be streamed from
// anywhere without holding a tensor in memory.
type DataFunc func(t *Tensor, w io.Writer) error

// Layout is the File that parsing the written file will give (Path
// empty), computed without writing anything: tensor offsets, data
// offset, file size.
func (w *Writer) Layout() (*File, error) {
	f, _, err := w.layout()
	return f, err
}

func (w *Writer) layout() (*File, []byte, error) {
	version := w.Version
	if version == 0 {
		version = 3
	}
	if version != 2 && version != 3 {
		return nil, nil, fmt.Errorf("gguf: cannot write version %d (want 2 or 3)", version)
	}
	f := &File{Version: version, Alignment: DefaultAlignment, SplitCount: 1, Metadata: w.Metadata}
	seen := map[string]bool{}
	for i, kv := range w.Metadata {
		if seen[kv.Key] {
			return nil, nil, fmt.Errorf("gguf: metadata %d: duplicate key %q", i, kv.Key)
		}
		seen[kv.Key] = true
		if err := checkValue(kv.Value, 0); err != nil {
			return nil, nil, fmt.Errorf("gguf: metadata %q: %w", kv.Key, err)
		}
	}
	if err := f.readGeneral(); err != nil {
		return nil, nil, err
	}
	f.byName = make(map[string]*Tensor, len(w.Tensors))
	var off int64
	for i, ti := range w.Tensors {
		t := &Tensor{Name: ti.Name, Type: ti.Type, Dims: append([]int64(nil), ti.Dims...), Index: i}
		size, err := tensorSize(ti)
		if err != nil {
			return nil, nil, fmt.Errorf("gguf: tensor %d %q: %w", i, ti.Name, err)
		}
		if f.byName[ti.Name] != nil {
			return nil, nil, fmt.Errorf("gguf: tensor %d %q: duplicate name", i, ti.Name)
		}
		t.Size = size
		t.Offset = off
		off = alignUp(off+size, f.Alignment)
		t.classify()
		f.byName[t.Name] = t
		f.Tensors = append(f.Tensors, t)
	}
	hdr := encodeHeader(version, w.Metadata, f.Tensors)
	f.HeaderSize = int64(len(hdr))
	f.DataOffset = alignUp(f.HeaderSize, f.Alignment)
	f.Size = f.DataOffset + off
	for _, t := range f.Tensors {
		t.FileOffset = f.DataOffset + t.Offset
	}
	var err error
	if f.index, f.byOffset, err = buildIndex(f.Tensors); err != nil {
		return nil, nil, err
	}
	return f, hdr, nil
}

func tensorSize(ti TensorInfo) (int64, error) {
	if !ti.Type.Valid() {
		return 0, fmt.Errorf("%w %s", ErrUnknownType, ti.Type)
	}
	if len(ti.Dims) < 1 || len(ti.Dims) > MaxDims {
		return 0, fmt.Errorf("%d dimensions, want 1 to %d", len(ti.Dims), MaxDims)
	}
	n := int64(1)
	for _, d := range ti.Dims {
		if d <= 0 {
			return 0, fmt.Errorf("dimension %d in %v is not positive", d, ti.Dims)
		}
		if n > math.MaxInt64/d {
			return 0, fmt.Errorf("dimensions %v overflow", ti.Dims)
		}
		n *= d
	}
	row, err := ti.Type.RowSize(ti.Dims[0])
	if err != nil {
		return 0, err
	}
	rows := n / ti.Dims[0]
	if row > math.MaxInt64/rows {
		return 0, fmt.Errorf("dimensions %v overflow", ti.Dims)
	}
	return row * rows, nil
}

// checkValue rejects Go values that have no GGUF encoding, and arrays
// whose Values do not match Elem.
func checkValue(v any, depth int) error {
	t, ok := valueTypeOf(v)
	if !ok {
		return fmt.Errorf("a Go value of type %T has no GGUF type", v)
	}
	if t != ValueArray {
		return nil
	}
	if depth >= maxArrayDepth {
		return fmt.Errorf("arrays nested deeper than %d", maxArrayDepth)
	}
	a := v.(Array)
	want := map[ValueType]string{
		ValueUint8: "[]uint8", ValueInt8: "[]int8", ValueUint16: "[]uint16", ValueInt16: "[]int16",
		ValueUint32: "[]uint32", ValueInt32: "[]int32", ValueFloat32: "[]float32", ValueBool: "[]bool",
		ValueString: "[]string", ValueUint64: "[]uint64", ValueInt64: "[]int64", ValueFloat64: "[]float64",
		ValueArray: "[]gguf.Array",
	}[a.Elem]
	if got := fmt.Sprintf("%T", a.Values); a.Values != nil && got != want {
		return fmt.Errorf("array of %s holds %s, want %s", a.Elem, got, want)
	}
	if a.Values == nil && !a.Elem.Valid() {
		return fmt.Errorf("array of unknown element type %d", a.Elem)
	}
	if sub, ok := a.Values.([]Array); ok {
		for _, s := range sub {
			if err := checkValue(s, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// Write writes the file to dst, calling data for each tensor's bytes (a
// nil data writes zeros). Memory stays bounded whatever the tensor
// sizes. It returns the number of bytes written.
func (w *Writer) Write(dst io.Writer, data DataFunc) (int64, error) {
	f, hdr, err := w.layout()
	if err != nil {
		return 0, err
	}
	bw := bufio.NewWriterSize(dst, 1<<20)
	cw := &countWriter{w: bw}
	if _, err := cw.Write(hdr); err != nil {
		return cw.n, err
	}
	if err := writeZeros(cw, f.DataOffset-cw.n); err != nil {
		return cw.n, err
	}
	for _, t := range f.Tensors {
		tw := &tensorWriter{w: cw, t: t, left: t.Size}
		if data != nil {
			if err := data(t, tw); err != nil {
				return cw.n, fmt.Errorf("gguf: writing tensor %q: %w", t.Name, err)
			}
		} else if err := writeZeros(tw, t.Size); err != nil {
			return cw.n, err
		}
		if tw.left != 0 {
			return cw.n, fmt.Errorf("gguf: tensor %q: data callback wrote %d of %d bytes", t.Name, t.Size-tw.left, t.Size)
		}
		if err := writeZeros(cw, alignUp(cw.n, f.Alignment)-cw.n); err != nil {
			return cw.n, err
		}
	}
	if err := bw.Flush(); err != nil {
		return cw.n, err
	}
	if cw.n != f.Size {
		return cw.n, fmt.Errorf("gguf: internal: wrote %d bytes, layout says %d", cw.n, f.Size)
	}
	return cw.n, nil
}

var zeros [64 << 10]byte

func writeZeros(w io.Writer, n int64) error {
	for n > 0 {
		k := min(n, int64(len(zeros)))
		if _, err := w.Write(zeros[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// tensorWriter refuses bytes beyond the tensor's size, so that a buggy
// callback cannot shift every later tensor.
type tensorWriter struct {
	w    io.Writer
	t    *Tensor
	left int64
}

func (tw *tensorWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > tw.left {
		return 0, fmt.Errorf("tensor %q: %d bytes written past its size %d", tw.t.Name, int64(len(p))-tw.left, tw.t.Size)
	}
	n, err := tw.w.Write(p)
	tw.left -= int64(n)
	return n, err
}

// encodeHeader encodes magic, version, counts, metadata and tensor infos.
func encodeHeader(version uint32, md Metadata, ts []*Tensor) []byte {
	e := encoder{}
	e.b = append(e.b, Magic...)
	e.u32(version)
	e.u64(uint64(len(ts)))
	e.u64(uint64(len(md)))
	for _, kv := range md {
		e.str(kv.Key)
		t, _ := valueTypeOf(kv.Value)
		e.u32(uint32(t))
		e.value(kv.Value)
	}
	for _, t := range ts {
		e.str(t.Name)
		e.u32(uint32(len(t.Dims)))
		for _, d := range t.Dims {
			e.u64(uint64(d))
		}
		e.u32(uint32(t.Type))
		e.u64(uint64(t.Offset))
	}
	return e.b
}

type encoder struct{ b []byte }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u16(v uint16) { e.b = binary.LittleEndian.AppendUint16(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.LittleEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.LittleEndian.AppendUint64(e.b, v) }
func (e *encoder) str(s string) {
	e.u64(uint64(len(s)))
	e.b = append(e.b, s...)
}

func (e *encoder) value(v any) {
	switch x := v.(type) {
	case uint8:
		e.u8(x)
	case int8:
		e.u8(uint8(x))
	case uint16:
		e.u16(x)
	case int16:
		e.u16(uint16(x))
	case uint32:
		e.u32(x)
	case int32:
		e.u32(uint32(x))
	case float32:
		e.u32(math.Float32bits(x))
	case bool:
		if x {
			e.u8(1)
		} else {
			e.u8(0)
		}
	case string:
		e.str(x)
	case uint64:
		e.u64(x)
	case int64:
		e.u64(uint64(x))
	case float64:
		e.u64(math.Float64bits(x))
	case Array:
		e.u32(uint32(x.Elem))
		e.u64(uint64(x.Len()))
		switch vs := x.Values.(type) {
		case []uint8:
			e.b = append(e.b, vs...)
		case []int8:
			for _, y := range vs {
				e.u8(uint8(y))
			}
		case []uint16:
			for _, y := range vs {
				e.u16(y)
			}
		case []int16:
			for _, y := range vs {
				e.u16(uint16(y))
			}
		case []uint32:
			for _, y := range vs {
				e.u32(y)
			}
		case []int32:
			for _, y := range vs {
				e.u32(uint32(y))
			}
		case []float32:
			for _, y := range vs {
				e.u32(math.Float32bits(y))
			}
		case []bool:
			for _, y := range vs {
				e.value(y)
			}
		case []string:
			for _, y := range vs {
				e.str(y)
			}
		case []uint64:
			for _, y := range vs {
				e.u64(y)
			}
		case []int64:
			for _, y := range vs {
				e.u64(uint64(y))
			}
		case []float64:
			for _, y := range vs {
				e.u64(math.Float64bits(y))
			}
		case []Array:
			for _, y := range vs {
				e.value(y)
			}
		}
	}
}
