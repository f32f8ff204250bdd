package gguf

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"runtime"
	"strings"
	"testing"
)

// rawFile builds GGUF bytes field by field, so that tests can write what
// the Writer refuses to.
type rawFile struct{ b []byte }

func (r *rawFile) u32(v uint32) *rawFile { r.b = binary.LittleEndian.AppendUint32(r.b, v); return r }
func (r *rawFile) u64(v uint64) *rawFile { r.b = binary.LittleEndian.AppendUint64(r.b, v); return r }
func (r *rawFile) str(s string) *rawFile { r.u64(uint64(len(s))); r.b = append(r.b, s...); return r }

// header starts a v3 file with the given counts.
func header(tensors, kvs uint64) *rawFile {
	r := &rawFile{b: []byte(Magic)}
	return r.u32(3).u64(tensors).u64(kvs)
}

func (r *rawFile) kvU32(key string, v uint32) *rawFile {
	return r.str(key).u32(uint32(ValueUint32)).u32(v)
}

func (r *rawFile) tensor(name string, typ Type, off uint64, dims ...uint64) *rawFile {
	r.str(name).u32(uint32(len(dims)))
	for _, d := range dims {
		r.u64(d)
	}
	return r.u32(uint32(typ)).u64(off)
}

// data pads to the alignment and appends n bytes of tensor data.
func (r *rawFile) data(align, n int) []byte {
	for len(r.b)%align != 0 {
		r.b = append(r.b, 0)
	}
	return append(r.b, make([]byte, n)...)
}

func TestParseRejects(t *testing.T) {
	valid := encode(t, &Writer{
		Metadata: Metadata{{Key: "general.architecture", Value: "llama"}},
		Tensors:  []TensorInfo{{Name: "a", Type: TypeF32, Dims: []int64{8}}},
	})
	for _, c := range []struct {
		name string
		file []byte
		kind error
		msg  string
	}{
		{"empty file", nil, ErrNotGGUF, "too short"},
		{"wrong magic", append([]byte("GGJT"), valid[4:]...), ErrNotGGUF, `magic "GGJT"`},
		{"version 1", patch(valid, 4, 1, 0, 0, 0), ErrVersion, "version 1 is not supported"},
		{"version 4", patch(valid, 4, 4, 0, 0, 0), ErrVersion, "version 4"},
		{"big endian", patch(valid, 4, 0, 0, 0, 3), ErrVersion, "big-endian"},
		{"absurd tensor count", header(1<<40, 0).b, ErrCorrupt, "tensor count 1099511627776"},
		{"tensor count beyond file", header(1000, 0).b, ErrTruncated, "tensor count 1000"},
		{"kv count beyond file", header(0, 1000).b, ErrTruncated, "metadata count 1000"},
		{"key length beyond file", pad(header(0, 1).u64(1<<40).b, 64), ErrCorrupt, "metadata 0 key length"},
		{"key length past end", pad(header(0, 1).u64(100).b, 20), ErrTruncated, "metadata 0 key length 100"},
		{"unknown value type", header(0, 1).str("k").u32(13).b, ErrUnknownType, `metadata 0 "k": unknown value type 13`},
		{"array length beyond file", header(0, 1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueUint64)).u64(1000).b, ErrTruncated, `"k": array length 1000`},
		{"string array beyond file", header(0, 1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(1 << 30).b, ErrCorrupt, "array length"},
		{"unknown array element type", header(0, 1).str("k").u32(uint32(ValueArray)).u32(77).u64(0).b, ErrUnknownType, "element type 77"},
		{"arrays nested too deep", deepArray(20), ErrCorrupt, "nested deeper"},
		{"duplicate key", header(0, 2).kvU32("k", 1).kvU32("k", 2).b, ErrCorrupt, `duplicate key "k"`},
		{"alignment not a power of two", header(0, 1).kvU32("general.alignment", 48).b, ErrCorrupt, "general.alignment 48 is not a power of two"},
		{"alignment zero", header(0, 1).kvU32("general.alignment", 0).b, ErrCorrupt, "general.alignment 0"},
		{"alignment not an integer", header(0, 1).str("general.alignment").u32(uint32(ValueString)).str("32").b, ErrCorrupt, "type string"},
		{"five dimensions", header(1, 0).tensor("t", TypeF32, 0, 1, 1, 1, 1, 1).data(32, 4), ErrCorrupt, `tensor 0 "t": 5 dimensions`},
		{"zero dimension", header(1, 0).tensor("t", TypeF32, 0, 4, 0).data(32, 16), ErrCorrupt, `tensor 0 "t": dimension 1 is 0`},
		{"negative dimension", header(1, 0).tensor("t", TypeF32, 0, 4, math.MaxUint64).data(32, 16), ErrCorrupt, "dimension 1 is -1"},
		{"element count overflow", header(1, 0).tensor("t", TypeF32, 0, 1<<40, 1<<40).data(32, 16), ErrCorrupt, "overflows"},
		{"row size overflow", header(1, 0).tensor("t", TypeF16, 0, 1<<62).data(32, 16), ErrCorrupt, "row of 4611686018427387904 elements of F16 overflows"},
		{"byte size overflow", header(1, 0).tensor("t", TypeF64, 0, 1<<31, 1<<31).data(32, 16), ErrCorrupt, "overflows"},
		{"unknown tensor type", header(1, 0).tensor("t", 99, 0, 4).data(32, 16), ErrUnknownType, "unknown tensor type type(99)"},
		{"removed tensor type", header(1, 0).tensor("t", 31, 0, 32).data(32, 18), ErrUnknownType, "no longer supported by ggml: Q4_0_4_4"},
		{"partial block", header(1, 0).tensor("t", TypeQ8_0, 0, 33).data(32, 68), ErrCorrupt, "not a multiple of Q8_0's block size 32"},
		{"offset past EOF", header(1, 0).tensor("blk.1.ffn_up.weight", TypeF32, 123456, 4).data(32, 16), ErrTruncated, `tensor 0 "blk.1.ffn_up.weight": data offset 123456 past end of file`},
		{"data past EOF", header(1, 0).tensor("t", TypeF32, 0, 8).data(32, 16), ErrTruncated, "ends past end of file"},
		{"header past EOF", header(1, 0).tensor("t", TypeF32, 0, 1).b, ErrTruncated, "past end of file"},
		{"misaligned offset", header(1, 0).tensor("t", TypeF32, 4, 1).data(32, 64), ErrCorrupt, "data offset 4 is not a multiple of the alignment 32"},
		{"overlapping tensors", header(2, 0).tensor("a", TypeF32, 0, 16).tensor("b", TypeF32, 32, 16).data(32, 128), ErrCorrupt, `tensor 1 "b" (bytes [`},
		{"duplicate tensor names", header(2, 0).tensor("a", TypeF32, 0, 1).tensor("a", TypeF32, 32, 1).data(32, 64), ErrCorrupt, `tensor 1 "a": duplicate name (also tensor 0)`},
		{"tensor name beyond file", pad(header(1, 0).u64(1<<20).b, 64), ErrTruncated, "tensor 0 name length"},
		{"split.no out of range", header(0, 2).kvU32("split.count", 2).kvU32("split.no", 2).b, ErrCorrupt, "split.no 2"},
	} {
		t.Run(strings.ReplaceAll(c.name, " ", "_"), func(t *testing.T) {
			f, err := parseBytes(c.file)
			if err == nil {
				t.Fatalf("parsed: %+v", f)
			}
			if !errors.Is(err, c.kind) {
				t.Errorf("error %q is not %v", err, c.kind)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error %T is not *gguf.Error", err)
			}
			if !strings.HasPrefix(err.Error(), "gguf: ") || !strings.Contains(err.Error(), c.msg) {
				t.Errorf("error %q, want it to contain %q", err, c.msg)
			}
		})
	}
}

func pad(b []byte, n int) []byte { return append(b, make([]byte, n)...) }

func deepArray(depth int) []byte {
	r := header(0, 1).str("k").u32(uint32(ValueArray))
	for i := 0; i < depth; i++ {
		r.u32(uint32(ValueArray)).u64(1)
	}
	return r.u32(uint32(ValueUint8)).u64(0).b
}

func TestParseRejectsEveryTruncation(t *testing.T) {
	full := synthSeed(t)
	f, err := parseBytes(full)
	if err != nil {
		t.Fatal(err)
	}
	last := f.TensorsByOffset()[len(f.Tensors)-1]
	for n := 0; n < len(full); n++ {
		if n > int(f.DataOffset) && n%61 != 0 && n != len(full)-1 && n != int(last.End())-1 {
			continue // every header byte, then a sample of the data
		}
		_, err := parseBytes(full[:n])
		if n >= int(last.End()) {
			// Only the final tensor's padding is missing: still whole.
			if err != nil {
				t.Fatalf("%d of %d bytes (last tensor ends at %d): %v", n, len(full), last.End(), err)
			}
			continue
		}
		if err == nil {
			t.Fatalf("%d of %d bytes parsed", n, len(full))
		}
		if n >= 4 && !errors.Is(err, ErrTruncated) {
			t.Fatalf("%d bytes: %v is not ErrTruncated", n, err)
		}
	}
}

func TestParseAcceptsVersion2AndNoTensors(t *testing.T) {
	b := encode(t, &Writer{Version: 2})
	f, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Version != 2 || len(f.Tensors) != 0 || f.Alignment != DefaultAlignment {
		t.Errorf("%+v", f)
	}
	if _, ok := f.Lookup(0); ok {
		t.Error("lookup in a file without tensors hit")
	}
}

func TestParseAcceptsNonSequentialLayout(t *testing.T) {
	// Writers other than llama.cpp may order data differently from the
	// infos; only alignment and disjointness matter.
	b := header(2, 0).tensor("late", TypeF32, 64, 8).tensor("early", TypeF32, 0, 8).data(32, 96)
	f, err := parseBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if f.Tensors[0].Name != "late" || f.TensorsByOffset()[0].Name != "early" {
		t.Errorf("order: %v %v", f.Tensors[0].Name, f.TensorsByOffset()[0].Name)
	}
}

func TestParseAcceptsAnyIntegerAlignment(t *testing.T) {
	b := header(0, 1).str("general.alignment").u32(uint32(ValueUint64)).u64(64).b
	f, err := parseBytes(b)
	if err != nil || f.Alignment != 64 {
		t.Fatalf("%v %v", f, err)
	}
}

func TestParseDoesNotAllocateForHostileCounts(t *testing.T) {
	// Claims of huge strings and arrays are checked against the bytes
	// left before anything is allocated.
	files := [][]byte{
		pad(header(0, 1).u64(60<<20).b, 20),
		pad(header(0, 1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueUint64)).u64(1<<25).b, 20),
		pad(header(1<<19, 0).b, 20),
		append(header(0, 1).str("k").u32(uint32(ValueArray)).u32(uint32(ValueString)).u64(1<<20).b, bytes.Repeat([]byte{0xff}, 8<<20)...),
	}
	for i, b := range files {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if _, err := parseBytes(b); err == nil {
			t.Fatalf("file %d parsed", i)
		}
		runtime.ReadMemStats(&after)
		if n := after.TotalAlloc - before.TotalAlloc; n > 2<<20 {
			t.Errorf("file %d: %d bytes allocated parsing %d hostile bytes", i, n, len(b))
		}
	}
}

func TestTypeTableSizes(t *testing.T) {
	// Bytes per block and elements per block, from ggml's type_traits.
	for _, c := range []struct {
		t          Type
		name       string
		blck, size int64
	}{
		{TypeF32, "F32", 1, 4}, {TypeF16, "F16", 1, 2}, {TypeBF16, "BF16", 1, 2}, {TypeF64, "F64", 1, 8},
		{TypeI8, "I8", 1, 1}, {TypeI16, "I16", 1, 2}, {TypeI32, "I32", 1, 4}, {TypeI64, "I64", 1, 8},
		{TypeQ4_0, "Q4_0", 32, 18}, {TypeQ4_1, "Q4_1", 32, 20}, {TypeQ5_0, "Q5_0", 32, 22}, {TypeQ5_1, "Q5_1", 32, 24},
		{TypeQ8_0, "Q8_0", 32, 34}, {TypeQ8_1, "Q8_1", 32, 40},
		{TypeQ2_K, "Q2_K", 256, 84}, {TypeQ3_K, "Q3_K", 256, 110}, {TypeQ4_K, "Q4_K", 256, 144},
		{TypeQ5_K, "Q5_K", 256, 176}, {TypeQ6_K, "Q6_K", 256, 210}, {TypeQ8_K, "Q8_K", 256, 292},
		{TypeIQ2_XXS, "IQ2_XXS", 256, 66}, {TypeIQ2_XS, "IQ2_XS", 256, 74}, {TypeIQ3_XXS, "IQ3_XXS", 256, 98},
		{TypeIQ1_S, "IQ1_S", 256, 50}, {TypeIQ4_NL, "IQ4_NL", 32, 18}, {TypeIQ3_S, "IQ3_S", 256, 110},
		{TypeIQ2_S, "IQ2_S", 256, 82}, {TypeIQ4_XS, "IQ4_XS", 256, 136}, {TypeIQ1_M, "IQ1_M", 256, 56},
		{TypeTQ1_0, "TQ1_0", 256, 54}, {TypeTQ2_0, "TQ2_0", 256, 66}, {TypeMXFP4, "MXFP4", 32, 17},
		{TypeNVFP4, "NVFP4", 64, 36}, {TypeQ1_0, "Q1_0", 128, 18}, {TypeQ2_0, "Q2_0", 64, 18},
	} {
		if c.t.String() != c.name || c.t.BlockSize() != c.blck || c.t.TypeSize() != c.size {
			t.Errorf("%d: %s %d/%d, want %s %d/%d", uint32(c.t), c.t, c.t.BlockSize(), c.t.TypeSize(), c.name, c.blck, c.size)
		}
		if p, ok := ParseType(strings.ToLower(c.name)); !ok || p != c.t {
			t.Errorf("ParseType(%q) = %v %v", c.name, p, ok)
		}
		if rs, err := c.t.RowSize(c.blck * 10); err != nil || rs != c.size*10 {
			t.Errorf("%s: row of 10 blocks %d %v", c.t, rs, err)
		}
		if c.blck > 1 {
			if _, err := c.t.RowSize(c.blck + 1); err == nil {
				t.Errorf("%s: partial block accepted", c.t)
			}
		}
	}
	if n := len(Types()); n != 35 {
		t.Errorf("%d valid types, want 35", n)
	}
	for _, id := range []Type{4, 5, 31, 32, 33, 36, 37, 38, 43, 1000} {
		if id.Valid() {
			t.Errorf("type %d valid", id)
		}
	}
}

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		name  string
		layer int
		role  string
	}{
		{"blk.5.attn_q.weight", 5, "attn_q"},
		{"blk.12.ffn_down_exps.weight", 12, "ffn_down_exps"},
		{"blk.0.attn_q.bias", 0, "attn_q"},
		{"token_embd.weight", -1, "token_embd"},
		{"output.weight", -1, "output"},
		{"output_norm.weight", -1, "output_norm"},
		{"v.blk.3.attn_k.weight", 3, "attn_k"},
		{"rope_freqs.weight", -1, "rope_freqs"},
		{"blk.x.attn_q.weight", -1, "blk.x.attn_q"},
		{"blk.7", -1, "blk.7"},
		{"myblk.3.x", -1, "myblk.3.x"},
		{".weight", -1, ".weight"},
	} {
		l, r := ParseName(c.name)
		if l != c.layer || r != c.role {
			t.Errorf("ParseName(%q) = %d %q, want %d %q", c.name, l, r, c.layer, c.role)
		}
	}
}
