package gguf

import (
	"bytes"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// writeFile writes w to a temp file with the given data callback and
// returns its path.
func writeFile(t testing.TB, w *Writer, data DataFunc) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	fd, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(fd, data); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func encode(t testing.TB, w *Writer) []byte {
	t.Helper()
	var b bytes.Buffer
	if _, err := w.Write(&b, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func parseBytes(b []byte) (*File, error) { return Parse(bytes.NewReader(b), int64(len(b))) }

func TestRoundTripEveryMetadataType(t *testing.T) {
	values := []any{
		uint8(200), int8(-100), uint16(60000), int16(-30000), uint32(4e9), int32(-2e9),
		float32(1.5), true, false, "héllo", "", uint64(math.MaxUint64), int64(math.MinInt64), math.Pi,
		Array{Elem: ValueUint8, Values: []uint8{1, 2, 3}},
		Array{Elem: ValueInt8, Values: []int8{-1, 2}},
		Array{Elem: ValueUint16, Values: []uint16{1, 65535}},
		Array{Elem: ValueInt16, Values: []int16{-1, 32767}},
		Array{Elem: ValueUint32, Values: []uint32{7}},
		Array{Elem: ValueInt32, Values: []int32{-7, 8}},
		Array{Elem: ValueFloat32, Values: []float32{0.25, -1}},
		Array{Elem: ValueBool, Values: []bool{true, false, true}},
		Array{Elem: ValueString, Values: []string{"a", "", "▁the"}},
		Array{Elem: ValueUint64, Values: []uint64{1 << 63}},
		Array{Elem: ValueInt64, Values: []int64{-1 << 63}},
		Array{Elem: ValueFloat64, Values: []float64{math.Inf(1)}},
		Array{Elem: ValueString, Values: []string{}},
		Array{Elem: ValueArray, Values: []Array{
			{Elem: ValueInt32, Values: []int32{1, 2}},
			{Elem: ValueArray, Values: []Array{{Elem: ValueString, Values: []string{"deep"}}}},
		}},
	}
	var md Metadata
	for i, v := range values {
		md = append(md, KV{Key: "k" + string(rune('a'+i)), Value: v})
	}
	for _, version := range []uint32{2, 3} {
		w := &Writer{Version: version, Metadata: md}
		f, err := parseBytes(encode(t, w))
		if err != nil {
			t.Fatalf("v%d: %v", version, err)
		}
		if f.Version != version {
			t.Errorf("version %d, want %d", f.Version, version)
		}
		if !reflect.DeepEqual(f.Metadata, md) {
			for i := range md {
				if i >= len(f.Metadata) || !reflect.DeepEqual(f.Metadata[i], md[i]) {
					t.Errorf("v%d: metadata %d = %#v, want %#v", version, i, f.Metadata[i], md[i])
				}
			}
		}
	}
}

func TestRoundTripTensorLayout(t *testing.T) {
	w := &Writer{
		Metadata: Metadata{{Key: "general.alignment", Value: uint32(64)}, {Key: "general.architecture", Value: "llama"}},
		Tensors: []TensorInfo{
			{Name: "token_embd.weight", Type: TypeQ8_0, Dims: []int64{64, 10}},
			{Name: "blk.0.attn_norm.weight", Type: TypeF32, Dims: []int64{3}},
			{Name: "blk.0.ffn_up_exps.weight", Type: TypeF16, Dims: []int64{8, 4, 3}},
			{Name: "output.weight", Type: TypeQ4_K, Dims: []int64{256, 2}},
		},
	}
	want, err := w.Layout()
	if err != nil {
		t.Fatal(err)
	}
	// Every tensor's bytes are its index, so that reading the file at a
	// parsed offset proves the offset right.
	path := writeFile(t, w, func(tn *Tensor, w io.Writer) error {
		_, err := w.Write(bytes.Repeat([]byte{byte(tn.Index + 1)}, int(tn.Size)))
		return err
	})
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	if f.Size != int64(len(raw)) || f.Size != want.Size {
		t.Fatalf("size %d, layout %d, file %d", f.Size, want.Size, len(raw))
	}
	if f.Alignment != 64 || f.DataOffset%64 != 0 || f.DataOffset != want.DataOffset {
		t.Errorf("alignment %d data offset %d (layout %d)", f.Alignment, f.DataOffset, want.DataOffset)
	}
	wantSizes := []int64{10 * 2 * 34, 12, 8 * 4 * 3 * 2, 2 * 144}
	for i, tn := range f.Tensors {
		if tn.Size != wantSizes[i] {
			t.Errorf("%s: size %d, want %d", tn.Name, tn.Size, wantSizes[i])
		}
		if tn.FileOffset != want.Tensors[i].FileOffset || tn.FileOffset%64 != 0 {
			t.Errorf("%s: offset %d, layout %d", tn.Name, tn.FileOffset, want.Tensors[i].FileOffset)
		}
		if raw[tn.FileOffset] != byte(i+1) || raw[tn.End()-1] != byte(i+1) {
			t.Errorf("%s: bytes at [%d,%d) are not its own", tn.Name, tn.FileOffset, tn.End())
		}
		if tn.Path != path {
			t.Errorf("%s: path %q", tn.Name, tn.Path)
		}
	}
	ex := f.Tensor("blk.0.ffn_up_exps.weight")
	if ex.Experts != 3 || ex.ExpertSize != 8*4*2 || ex.Layer != 0 || ex.Role != "ffn_up_exps" {
		t.Errorf("expert tensor: %+v", ex)
	}
}

func TestWriterRejectsBadInput(t *testing.T) {
	for name, w := range map[string]*Writer{
		"partial block":  {Tensors: []TensorInfo{{Name: "a", Type: TypeQ8_0, Dims: []int64{33}}}},
		"zero dim":       {Tensors: []TensorInfo{{Name: "a", Type: TypeF32, Dims: []int64{0}}}},
		"five dims":      {Tensors: []TensorInfo{{Name: "a", Type: TypeF32, Dims: []int64{1, 1, 1, 1, 1}}}},
		"unknown type":   {Tensors: []TensorInfo{{Name: "a", Type: 31, Dims: []int64{32}}}},
		"duplicate name": {Tensors: []TensorInfo{{Name: "a", Type: TypeF32, Dims: []int64{1}}, {Name: "a", Type: TypeF32, Dims: []int64{1}}}},
		"go type":        {Metadata: Metadata{{Key: "x", Value: 3}}},
		"array mismatch": {Metadata: Metadata{{Key: "x", Value: Array{Elem: ValueString, Values: []int32{1}}}}},
		"alignment":      {Metadata: Metadata{{Key: "general.alignment", Value: uint32(48)}}},
		"duplicate key":  {Metadata: Metadata{{Key: "x", Value: true}, {Key: "x", Value: true}}},
	} {
		if _, err := w.Write(io.Discard, nil); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestWriterRejectsWrongDataLength(t *testing.T) {
	w := &Writer{Tensors: []TensorInfo{{Name: "a", Type: TypeF32, Dims: []int64{4}}}}
	short := func(_ *Tensor, w io.Writer) error { _, err := w.Write(make([]byte, 15)); return err }
	long := func(_ *Tensor, w io.Writer) error { _, err := w.Write(make([]byte, 17)); return err }
	for name, fn := range map[string]DataFunc{"short": short, "long": long} {
		if _, err := w.Write(io.Discard, fn); err == nil {
			t.Errorf("%s write: no error", name)
		}
	}
	boom := errors.New("boom")
	if _, err := w.Write(io.Discard, func(*Tensor, io.Writer) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("callback error not passed on: %v", err)
	}
}
