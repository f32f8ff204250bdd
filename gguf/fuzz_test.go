package gguf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// fuzzSeeds are small valid files the fuzzer mutates; broken variants
// live in testdata/fuzz/FuzzParse.
func fuzzSeeds(t testing.TB) [][]byte {
	full := &Writer{
		Metadata: Metadata{
			{Key: "general.architecture", Value: "llama"},
			{Key: "general.alignment", Value: uint32(32)},
			{Key: "u8", Value: uint8(1)}, {Key: "i8", Value: int8(-1)}, {Key: "u16", Value: uint16(2)},
			{Key: "i16", Value: int16(-2)}, {Key: "u32", Value: uint32(3)}, {Key: "i32", Value: int32(-3)},
			{Key: "f32", Value: float32(0.5)}, {Key: "b", Value: true}, {Key: "u64", Value: uint64(4)},
			{Key: "i64", Value: int64(-4)}, {Key: "f64", Value: 0.25},
			{Key: "tokens", Value: Array{Elem: ValueString, Values: []string{"<unk>", "<s>"}}},
			{Key: "nested", Value: Array{Elem: ValueArray, Values: []Array{{Elem: ValueUint8, Values: []uint8{1}}}}},
		},
		Tensors: []TensorInfo{
			{Name: "token_embd.weight", Type: TypeQ8_0, Dims: []int64{32, 2}},
			{Name: "blk.0.attn_norm.weight", Type: TypeF32, Dims: []int64{5}},
			{Name: "blk.0.ffn_gate_exps.weight", Type: TypeF16, Dims: []int64{4, 2, 3}},
		},
	}
	split := &Writer{
		Version: 2,
		Metadata: Metadata{
			{Key: "split.no", Value: uint16(0)}, {Key: "split.count", Value: uint16(2)},
			{Key: "split.tensors.count", Value: int32(2)}, {Key: "general.alignment", Value: uint32(16)},
		},
		Tensors: []TensorInfo{{Name: "output.weight", Type: TypeQ4_K, Dims: []int64{256, 1}}},
	}
	var seeds [][]byte
	for _, w := range []*Writer{full, split, {}} {
		var b bytes.Buffer
		if _, err := w.Write(&b, nil); err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, b.Bytes())
	}
	return seeds
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := parseBytes(b)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error is not a *gguf.Error: %T %v", err, err)
			}
			if !errors.Is(err, ErrNotGGUF) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrTruncated) &&
				!errors.Is(err, ErrUnknownType) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error wraps no sentinel: %v", err)
			}
			return
		}
		checkInvariants(t, file, b)
	})
}

// checkInvariants checks what every successfully parsed file promises.
func checkInvariants(t *testing.T, f *File, raw []byte) {
	t.Helper()
	if f.DataOffset%f.Alignment != 0 || f.DataOffset < f.HeaderSize {
		t.Fatalf("data offset %d, header %d, alignment %d", f.DataOffset, f.HeaderSize, f.Alignment)
	}
	var prevEnd int64
	for _, tn := range f.TensorsByOffset() {
		if tn.FileOffset < f.DataOffset || tn.End() > f.Size || tn.Size <= 0 || tn.FileOffset < prevEnd {
			t.Fatalf("tensor %q at [%d,%d) in file of %d, data at %d, previous ends %d", tn.Name, tn.FileOffset, tn.End(), f.Size, f.DataOffset, prevEnd)
		}
		prevEnd = tn.End()
		for _, off := range []int64{tn.FileOffset, tn.End() - 1} {
			h, ok := f.Lookup(off)
			if !ok || h.Tensor != tn || h.Offset != off-tn.FileOffset {
				t.Fatalf("lookup %d: %+v %v, want %q", off, h, ok, tn.Name)
			}
			if (tn.Experts > 0) != (h.Expert >= 0) || h.Expert >= max(tn.Experts, 1) {
				t.Fatalf("lookup %d in %q: expert %d of %d", off, tn.Name, h.Expert, tn.Experts)
			}
		}
		if tn.Experts > 0 && int64(tn.Experts)*tn.ExpertSize != tn.Size {
			t.Fatalf("%q: %d experts of %d bytes, size %d", tn.Name, tn.Experts, tn.ExpertSize, tn.Size)
		}
	}
	var sum int64
	for _, s := range f.AppendSlices(nil, 0, f.Size+100) {
		sum += s.Len
		if s.Len <= 0 {
			t.Fatalf("empty slice %+v", s)
		}
	}
	if sum != f.Size+100 {
		t.Fatalf("slices cover %d bytes, want %d", sum, f.Size+100)
	}
	// The header re-encodes to the same length and parses to the same
	// values (bytes may differ: a bool stored as 2 reads as true).
	hdr := encodeHeader(f.Version, f.Metadata, f.Tensors)
	if int64(len(hdr)) != f.HeaderSize {
		t.Fatalf("re-encoded header is %d bytes, parsed %d", len(hdr), f.HeaderSize)
	}
	again, err := parseBytes(append(hdr, raw[f.HeaderSize:]...))
	if err != nil {
		t.Fatalf("re-encoded header does not parse: %v", err)
	}
	// %#v as fallback: NaN != NaN defeats DeepEqual but prints the same.
	if !reflect.DeepEqual(again.Metadata, f.Metadata) && fmt.Sprintf("%#v", again.Metadata) != fmt.Sprintf("%#v", f.Metadata) {
		t.Fatalf("metadata changed in re-encoding")
	}
}

// TestWriteFuzzCorpus regenerates testdata/fuzz/FuzzParse seed files when
// GGUF_WRITE_CORPUS is set; the committed files are its output.
func TestWriteFuzzCorpus(t *testing.T) {
	if os.Getenv("GGUF_WRITE_CORPUS") == "" {
		t.Skip("set GGUF_WRITE_CORPUS=1 to regenerate the fuzz seed corpus")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzParse")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) {
		body := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range corpusCases(t) {
		write(c.name, c.data)
	}
}

type corpusCase struct {
	name string
	data []byte
}

// corpusCases are seeds: valid files, and each kind of broken file the
// parser must reject (so the fuzzer starts next to every check).
func corpusCases(t testing.TB) []corpusCase {
	seeds := fuzzSeeds(t)
	cs := []corpusCase{{"seed-full", seeds[0]}, {"seed-split-v2", seeds[1]}, {"seed-empty", seeds[2]}}
	synth := synthSeed(t)
	cs = append(cs, corpusCase{"seed-synth-moe", synth})
	full := seeds[0]
	cs = append(cs,
		corpusCase{"broken-truncated-header", full[:len(full)/3]},
		corpusCase{"broken-truncated-data", full[:len(full)-40]},
		corpusCase{"broken-magic", append([]byte("GGML"), full[4:]...)},
		corpusCase{"broken-v1", patch(full, 4, 1, 0, 0, 0)},
		corpusCase{"broken-tensor-count", patch(full, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f)},
	)
	return cs
}

func patch(b []byte, at int, with ...byte) []byte {
	c := bytes.Clone(b)
	copy(c[at:], with)
	return c
}
