package gguf

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"sort"
)

// Magic is the first four bytes of every GGUF file.
const Magic = "GGUF"

// DefaultAlignment is the data alignment when general.alignment is absent.
const DefaultAlignment = 32

// Limits on values real models never come near. They keep a hostile
// header in a large file (where "fits in the remaining bytes" is a weak
// bound) from making us allocate gigabytes.
const (
	maxStringLen  = 64 << 20 // a tokenizer.huggingface.json is a few MiB
	maxArrayLen   = 1 << 26  // vocabularies have ~10^5..10^6 entries
	maxTensors    = 1 << 20  // the largest models have ~10^4
	maxKVs        = 1 << 20
	maxArrayDepth = 8 // ggml itself refuses nested arrays
	maxAlignment  = 1 << 30
)

// File is one parsed GGUF file: its header and where each tensor's bytes
// are. It holds no open file descriptor.
type File struct {
	Path    string
	Size    int64
	Version uint32
	// Alignment is general.alignment, or DefaultAlignment.
	Alignment int64
	// HeaderSize is where the header (magic, metadata, tensor infos) ends;
	// DataOffset is where the data section starts: HeaderSize rounded up
	// to Alignment.
	HeaderSize int64
	DataOffset int64
	Metadata   Metadata
	// Tensors is in header order.
	Tensors []*Tensor
	// SplitNo and SplitCount are split.no (0-based) and split.count;
	// 0 and 1 for a file that is not part of a split model.
	SplitNo, SplitCount int

	byName   map[string]*Tensor
	index    *OffsetIndex[*Tensor]
	byOffset []*Tensor
}

// Tensor returns the tensor called name, or nil.
func (f *File) Tensor(name string) *Tensor { return f.byName[name] }

// Architecture is general.architecture ("llama"), or "".
func (f *File) Architecture() string {
	s, _ := f.Metadata.String("general.architecture")
	return s
}

// Open parses the GGUF file at path. It reads only the header.
func Open(path string) (*File, error) {
	fd, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fd.Close()
	st, err := fd.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, newError(ErrNotGGUF, -1, "%s is not a regular file", path)
	}
	f, err := Parse(fd, st.Size())
	if err != nil {
		return nil, err
	}
	f.Path = path
	for _, t := range f.Tensors {
		t.Path = path
	}
	return f, nil
}

// Parse parses a GGUF file of the given size from r. It reads only the
// header, never the tensor data.
func Parse(r io.ReaderAt, size int64) (*File, error) {
	p := &parser{
		br:   bufio.NewReaderSize(io.NewSectionReader(r, 0, size), 64<<10),
		size: size,
	}
	f, err := p.parse()
	if err != nil {
		return nil, err
	}
	return f, nil
}

type parser struct {
	br   *bufio.Reader
	pos  int64
	size int64
	buf  [8]byte
}

func (p *parser) remaining() int64 { return p.size - p.pos }

// read fills b, turning a short read into a truncation error that says
// what was being read.
func (p *parser) read(b []byte, what string) error {
	if int64(len(b)) > p.remaining() {
		return newError(ErrTruncated, p.pos, "truncated at offset %d reading %s (file size %d)", p.pos, what, p.size)
	}
	n, err := io.ReadFull(p.br, b)
	p.pos += int64(n)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return newError(ErrTruncated, p.pos, "truncated at offset %d reading %s (file size %d)", p.pos, what, p.size)
		}
		return &Error{Offset: p.pos, Msg: fmt.Sprintf("read at offset %d: %v", p.pos, err), Err: err}
	}
	return nil
}

func (p *parser) u8(what string) (uint8, error) {
	err := p.read(p.buf[:1], what)
	return p.buf[0], err
}

func (p *parser) u16(what string) (uint16, error) {
	err := p.read(p.buf[:2], what)
	return binary.LittleEndian.Uint16(p.buf[:2]), err
}

func (p *parser) u32(what string) (uint32, error) {
	err := p.read(p.buf[:4], what)
	return binary.LittleEndian.Uint32(p.buf[:4]), err
}

func (p *parser) u64(what string) (uint64, error) {
	err := p.read(p.buf[:8], what)
	return binary.LittleEndian.Uint64(p.buf[:8]), err
}

// count reads a 64-bit count and checks that count elements of at least
// minSize bytes each fit in the rest of the file and under limit.
func (p *parser) count(what string, minSize int64, limit int64) (int64, error) {
	at := p.pos
	c, err := p.u64(what)
	if err != nil {
		return 0, err
	}
	if c > uint64(limit) {
		return 0, newError(ErrCorrupt, at, "%s %d at offset %d exceeds the limit of %d", what, c, at, limit)
	}
	if minSize > 0 && int64(c) > p.remaining()/minSize {
		return 0, newError(ErrTruncated, at, "%s %d at offset %d needs at least %d bytes but only %d remain (file size %d)",
			what, c, at, int64(c)*minSize, p.remaining(), p.size)
	}
	return int64(c), nil
}

func (p *parser) str(what string) (string, error) {
	n, err := p.count(what+" length", 1, maxStringLen)
	if err != nil {
		return "", err
	}
	if n == 0 {
		return "", nil
	}
	b := make([]byte, n)
	if err := p.read(b, what); err != nil {
		return "", err
	}
	return string(b), nil
}

func (p *parser) parse() (*File, error) {
	var magic [4]byte
	if err := p.read(magic[:], "magic"); err != nil {
		if errors.Is(err, ErrTruncated) {
			return nil, newError(ErrNotGGUF, 0, "not a GGUF file: %d bytes, too short for the magic", p.size)
		}
		return nil, err
	}
	if string(magic[:]) != Magic {
		return nil, newError(ErrNotGGUF, 0, "not a GGUF file: magic %q, want %q", magic[:], Magic)
	}
	version, err := p.u32("version")
	if err != nil {
		return nil, err
	}
	switch {
	case version == 1:
		return nil, newError(ErrVersion, 4, "GGUF version 1 is not supported (it predates 64-bit counts; re-convert the model with a current llama.cpp)")
	case version == 2 || version == 3:
	case bits.ReverseBytes32(version) >= 1 && bits.ReverseBytes32(version) <= 3:
		return nil, newError(ErrVersion, 4, "big-endian GGUF (version %d) is not supported", bits.ReverseBytes32(version))
	default:
		return nil, newError(ErrVersion, 4, "GGUF version %d is not supported (want 2 or 3)", version)
	}
	f := &File{Size: p.size, Version: version, Alignment: DefaultAlignment, SplitCount: 1}

	// Smallest tensor info: empty name (8), n_dims (4), type (4), offset (8).
	nTensors, err := p.count("tensor count", 8+4+4+8, maxTensors)
	if err != nil {
		return nil, err
	}
	// Smallest metadata entry: empty key (8), type (4), one-byte value.
	nKV, err := p.count("metadata count", 8+4+1, maxKVs)
	if err != nil {
		return nil, err
	}

	f.Metadata = make(Metadata, 0, min(nKV, 256))
	seen := make(map[string]int, min(nKV, 256))
	for i := int64(0); i < nKV; i++ {
		kv, err := p.kv(i)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[kv.Key]; dup {
			return nil, newError(ErrCorrupt, p.pos, "metadata %d: duplicate key %q (also metadata %d)", i, kv.Key, j)
		}
		seen[kv.Key] = int(i)
		f.Metadata = append(f.Metadata, kv)
	}
	if err := f.readGeneral(); err != nil {
		return nil, err
	}

	f.Tensors = make([]*Tensor, 0, min(nTensors, 1024))
	f.byName = make(map[string]*Tensor, min(nTensors, 1024))
	for i := int64(0); i < nTensors; i++ {
		t, err := p.tensorInfo(int(i))
		if err != nil {
			return nil, err
		}
		if prev, dup := f.byName[t.Name]; dup {
			return nil, newError(ErrCorrupt, p.pos, "tensor %d %q: duplicate name (also tensor %d)", i, t.Name, prev.Index)
		}
		f.byName[t.Name] = t
		f.Tensors = append(f.Tensors, t)
	}
	f.HeaderSize = p.pos
	f.DataOffset = alignUp(p.pos, f.Alignment)
	if err := f.placeTensors(); err != nil {
		return nil, err
	}
	if f.index, f.byOffset, err = buildIndex(f.Tensors); err != nil {
		return nil, newError(ErrCorrupt, p.pos, "%v", err)
	}
	return f, nil
}

// readGeneral validates and extracts the metadata the layout depends on.
func (f *File) readGeneral() error {
	if v, ok := f.Metadata.Get("general.alignment"); ok {
		a, isInt := toInt(v)
		if !isInt {
			return newError(ErrCorrupt, -1, "general.alignment has type %s, want an integer", typeName(v))
		}
		if a <= 0 || a&(a-1) != 0 || a > maxAlignment {
			return newError(ErrCorrupt, -1, "general.alignment %d is not a power of two between 1 and %d", a, maxAlignment)
		}
		f.Alignment = a
	}
	if v, ok := f.Metadata.Get("split.count"); ok {
		c, isInt := toInt(v)
		if !isInt || c < 1 || c > 99999 {
			return newError(ErrCorrupt, -1, "split.count %s is not a shard count", FormatValue(v))
		}
		f.SplitCount = int(c)
		no, isInt := f.Metadata.Int("split.no")
		if !isInt || no < 0 || no >= c {
			v, _ := f.Metadata.Get("split.no")
			return newError(ErrCorrupt, -1, "split.no %s is not a shard number below split.count %d", FormatValue(v), c)
		}
		f.SplitNo = int(no)
	}
	return nil
}

func typeName(v any) string {
	if t, ok := valueTypeOf(v); ok {
		return t.String()
	}
	return fmt.Sprintf("%T", v)
}

func (p *parser) kv(i int64) (KV, error) {
	key, err := p.str(fmt.Sprintf("metadata %d key", i))
	if err != nil {
		return KV{}, err
	}
	at := p.pos
	tv, err := p.u32(fmt.Sprintf("metadata %d %q type", i, key))
	if err != nil {
		return KV{}, err
	}
	t := ValueType(tv)
	if !t.Valid() {
		return KV{}, newError(ErrUnknownType, at, "metadata %d %q: unknown value type %d at offset %d", i, key, tv, at)
	}
	v, err := p.value(t, 0)
	if err != nil {
		if e, ok := err.(*Error); ok {
			e.Msg = fmt.Sprintf("metadata %d %q: %s", i, key, e.Msg)
		}
		return KV{}, err
	}
	return KV{Key: key, Value: v}, nil
}

func (p *parser) value(t ValueType, depth int) (any, error) {
	switch t {
	case ValueUint8:
		return p.u8("uint8 value")
	case ValueInt8:
		v, err := p.u8("int8 value")
		return int8(v), err
	case ValueUint16:
		return p.u16("uint16 value")
	case ValueInt16:
		v, err := p.u16("int16 value")
		return int16(v), err
	case ValueUint32:
		return p.u32("uint32 value")
	case ValueInt32:
		v, err := p.u32("int32 value")
		return int32(v), err
	case ValueFloat32:
		v, err := p.u32("float32 value")
		return math.Float32frombits(v), err
	case ValueBool:
		v, err := p.u8("bool value")
		return v != 0, err
	case ValueString:
		return p.str("string value")
	case ValueUint64:
		return p.u64("uint64 value")
	case ValueInt64:
		v, err := p.u64("int64 value")
		return int64(v), err
	case ValueFloat64:
		v, err := p.u64("float64 value")
		return math.Float64frombits(v), err
	case ValueArray:
		return p.array(depth + 1)
	}
	return nil, newError(ErrUnknownType, p.pos, "unknown value type %d", uint32(t))
}

func (p *parser) array(depth int) (Array, error) {
	at := p.pos
	if depth > maxArrayDepth {
		return Array{}, newError(ErrCorrupt, at, "arrays nested deeper than %d at offset %d", maxArrayDepth, at)
	}
	et, err := p.u32("array element type")
	if err != nil {
		return Array{}, err
	}
	elem := ValueType(et)
	if !elem.Valid() {
		return Array{}, newError(ErrUnknownType, at, "unknown array element type %d at offset %d", et, at)
	}
	n, err := p.count("array length", elem.minEncodedSize(), maxArrayLen)
	if err != nil {
		return Array{}, err
	}
	a := Array{Elem: elem}
	le := binary.LittleEndian
	var fixedErr error
	switch elem {
	case ValueUint8:
		a.Values, fixedErr = fixed(p, n, 1, func(b []byte) uint8 { return b[0] })
	case ValueInt8:
		a.Values, fixedErr = fixed(p, n, 1, func(b []byte) int8 { return int8(b[0]) })
	case ValueBool:
		a.Values, fixedErr = fixed(p, n, 1, func(b []byte) bool { return b[0] != 0 })
	case ValueUint16:
		a.Values, fixedErr = fixed(p, n, 2, le.Uint16)
	case ValueInt16:
		a.Values, fixedErr = fixed(p, n, 2, func(b []byte) int16 { return int16(le.Uint16(b)) })
	case ValueUint32:
		a.Values, fixedErr = fixed(p, n, 4, le.Uint32)
	case ValueInt32:
		a.Values, fixedErr = fixed(p, n, 4, func(b []byte) int32 { return int32(le.Uint32(b)) })
	case ValueFloat32:
		a.Values, fixedErr = fixed(p, n, 4, func(b []byte) float32 { return math.Float32frombits(le.Uint32(b)) })
	case ValueUint64:
		a.Values, fixedErr = fixed(p, n, 8, le.Uint64)
	case ValueInt64:
		a.Values, fixedErr = fixed(p, n, 8, func(b []byte) int64 { return int64(le.Uint64(b)) })
	case ValueFloat64:
		a.Values, fixedErr = fixed(p, n, 8, func(b []byte) float64 { return math.Float64frombits(le.Uint64(b)) })
	case ValueString:
		// Grown as elements arrive rather than sized from the count: a
		// count that merely fits the remaining bytes of a large file would
		// otherwise cost 16 bytes of headers per claimed element up front.
		v := make([]string, 0, min(n, 1<<16))
		for range n {
			s, err := p.str("array string")
			if err != nil {
				return a, err
			}
			v = append(v, s)
		}
		a.Values = v
	case ValueArray:
		v := make([]Array, 0, min(n, 1<<12))
		for range n {
			s, err := p.array(depth + 1)
			if err != nil {
				return a, err
			}
			v = append(v, s)
		}
		a.Values = v
	}
	return a, fixedErr
}

// fixed reads n little-endian elements of size bytes each, each turned
// into a T by conv, in chunks so that no second copy of the array is
// held. On an error it returns nil (no array).
func fixed[T any](p *parser, n, size int64, conv func([]byte) T) (any, error) {
	v := make([]T, n)
	var chunk [4096]byte
	per := int64(len(chunk)) / size
	for i := int64(0); i < n; i += per {
		k := min(per, n-i)
		b := chunk[:k*size]
		if err := p.read(b, "array data"); err != nil {
			return nil, err
		}
		for j := range k {
			v[i+j] = conv(b[j*size:])
		}
	}
	return v, nil
}

func (p *parser) tensorInfo(i int) (*Tensor, error) {
	name, err := p.str(fmt.Sprintf("tensor %d name", i))
	if err != nil {
		return nil, err
	}
	t := &Tensor{Name: name, Index: i}
	ctx := func() string { return fmt.Sprintf("tensor %d %q", i, name) }
	at := p.pos
	nd, err := p.u32(ctx() + " dimension count")
	if err != nil {
		return nil, err
	}
	if nd > MaxDims {
		return nil, newError(ErrCorrupt, at, "%s: %d dimensions at offset %d, at most %d allowed", ctx(), nd, at, MaxDims)
	}
	t.Dims = make([]int64, nd)
	elems := int64(1)
	for d := range t.Dims {
		at := p.pos
		v, err := p.u64(ctx() + " dimension")
		if err != nil {
			return nil, err
		}
		if v == 0 || v > math.MaxInt64 {
			return nil, newError(ErrCorrupt, at, "%s: dimension %d is %d at offset %d, want a positive size", ctx(), d, int64(v), at)
		}
		t.Dims[d] = int64(v)
		if elems > math.MaxInt64/int64(v) {
			return nil, newError(ErrCorrupt, at, "%s: element count overflows with dimensions %v", ctx(), t.Dims[:d+1])
		}
		elems *= int64(v)
	}
	at = p.pos
	tv, err := p.u32(ctx() + " type")
	if err != nil {
		return nil, err
	}
	t.Type = Type(tv)
	if !t.Type.Valid() {
		what := "unknown tensor type"
		if int(tv) < len(typeTraits) && typeTraits[tv].removed {
			what = "tensor type no longer supported by ggml:"
		}
		return nil, newError(ErrUnknownType, at, "%s: %s %s at offset %d", ctx(), what, t.Type, at)
	}
	ne0 := int64(1)
	if nd > 0 {
		ne0 = t.Dims[0]
	}
	row, err := t.Type.RowSize(ne0)
	if err != nil {
		return nil, newError(ErrCorrupt, at, "%s: %v", ctx(), err)
	}
	rows := elems / ne0
	if rows > 0 && row > math.MaxInt64/rows {
		return nil, newError(ErrCorrupt, at, "%s: byte size overflows with dimensions %v", ctx(), t.Dims)
	}
	t.Size = row * rows
	at = p.pos
	off, err := p.u64(ctx() + " data offset")
	if err != nil {
		return nil, err
	}
	if off > uint64(p.size) {
		return nil, newError(ErrTruncated, at, "%s: data offset %d past end of file (size %d)", ctx(), off, p.size)
	}
	t.Offset = int64(off)
	t.classify()
	return t, nil
}

// placeTensors computes absolute offsets and checks that every tensor is
// aligned, inside the file, and disjoint from the others.
func (f *File) placeTensors() error {
	if len(f.Tensors) > 0 && f.DataOffset > f.Size {
		return newError(ErrTruncated, f.HeaderSize, "data section would start at %d, past end of file (size %d)", f.DataOffset, f.Size)
	}
	for _, t := range f.Tensors {
		ctx := fmt.Sprintf("tensor %d %q", t.Index, t.Name)
		if t.Offset%f.Alignment != 0 {
			return newError(ErrCorrupt, -1, "%s: data offset %d is not a multiple of the alignment %d", ctx, t.Offset, f.Alignment)
		}
		t.FileOffset = f.DataOffset + t.Offset
		if t.FileOffset > f.Size || t.Size > f.Size-t.FileOffset {
			if t.FileOffset >= f.Size {
				return newError(ErrTruncated, t.FileOffset, "%s: data offset %d (file offset %d) past end of file (size %d)", ctx, t.Offset, t.FileOffset, f.Size)
			}
			return newError(ErrTruncated, t.FileOffset, "%s: data [%d, %d) ends past end of file (size %d)", ctx, t.FileOffset, t.FileOffset+t.Size, f.Size)
		}
	}
	sorted := make([]*Tensor, len(f.Tensors))
	copy(sorted, f.Tensors)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].FileOffset < sorted[j].FileOffset })
	for i := 1; i < len(sorted); i++ {
		a, b := sorted[i-1], sorted[i]
		if b.FileOffset < a.End() {
			return newError(ErrCorrupt, b.FileOffset, "tensor %d %q (bytes [%d, %d)) overlaps tensor %d %q (bytes [%d, %d))",
				b.Index, b.Name, b.FileOffset, b.End(), a.Index, a.Name, a.FileOffset, a.End())
		}
	}
	return nil
}

func alignUp(n, a int64) int64 { return (n + a - 1) / a * a }
