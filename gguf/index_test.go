package gguf

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// lookupFile has a dense tensor, an expert tensor of 3 experts, and a
// small tensor whose padding leaves a gap, with alignment 64.
func lookupFile(t testing.TB) *File {
	t.Helper()
	w := &Writer{
		Metadata: Metadata{{Key: "general.alignment", Value: uint32(64)}},
		Tensors: []TensorInfo{
			{Name: "token_embd.weight", Type: TypeF32, Dims: []int64{16, 2}},            // 128 bytes
			{Name: "blk.0.ffn_up_exps.weight", Type: TypeQ8_0, Dims: []int64{32, 2, 3}}, // 3 experts × 68
			{Name: "output_norm.weight", Type: TypeF32, Dims: []int64{3}},               // 12 bytes
		},
	}
	f, err := w.Layout()
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLookupAtTensorBoundaries(t *testing.T) {
	f := lookupFile(t)
	emb, exps, norm := f.Tensors[0], f.Tensors[1], f.Tensors[2]
	if exps.ExpertSize != 68 || exps.Experts != 3 {
		t.Fatalf("expert tensor %+v", exps)
	}
	type want struct {
		t      *Tensor
		expert int
		offset int64
	}
	for _, c := range []struct {
		off  int64
		want *want
	}{
		{0, nil},
		{f.DataOffset - 1, nil},
		{emb.FileOffset, &want{emb, -1, 0}},
		{emb.End() - 1, &want{emb, -1, 127}},
		{emb.End(), &want{exps, 0, 0}}, // 128 is a multiple of 64: no gap
		{exps.FileOffset + 67, &want{exps, 0, 67}},
		{exps.FileOffset + 68, &want{exps, 1, 68}},
		{exps.FileOffset + 2*68, &want{exps, 2, 136}},
		{exps.End() - 1, &want{exps, 2, 203}},
		{exps.End(), nil}, // padding after the expert tensor
		{norm.FileOffset - 1, nil},
		{norm.FileOffset, &want{norm, -1, 0}},
		{norm.End() - 1, &want{norm, -1, 11}},
		{norm.End(), nil},
		{f.Size + 1000, nil},
		{-5, nil},
	} {
		h, ok := f.Lookup(c.off)
		if c.want == nil {
			if ok {
				t.Errorf("Lookup(%d) = %s, want no tensor", c.off, h.Tensor.Name)
			}
			if h.Expert != -1 {
				t.Errorf("Lookup(%d) miss has expert %d", c.off, h.Expert)
			}
			continue
		}
		if !ok || h.Tensor != c.want.t || h.Expert != c.want.expert || h.Offset != c.want.offset {
			name := "<none>"
			if h.Tensor != nil {
				name = h.Tensor.Name
			}
			t.Errorf("Lookup(%d) = %s expert %d offset %d, want %s expert %d offset %d",
				c.off, name, h.Expert, h.Offset, c.want.t.Name, c.want.expert, c.want.offset)
		}
	}
}

func TestAppendSlicesSplitsPagesAcrossTensorsAndExperts(t *testing.T) {
	f := lookupFile(t)
	emb, exps, norm := f.Tensors[0], f.Tensors[1], f.Tensors[2]
	type sl struct {
		name   string
		expert int
		off    int64
		n      int64
	}
	name := func(t *Tensor) string {
		if t == nil {
			return ""
		}
		return t.Name
	}
	for _, c := range []struct {
		desc   string
		off, n int64
		want   []sl
	}{
		{"header only", 0, 10, []sl{{"", -1, 0, 10}}},
		{"header into first tensor", f.DataOffset - 8, 16, []sl{{"", -1, 0, 8}, {emb.Name, -1, 0, 8}}},
		{"inside one tensor", emb.FileOffset + 4, 8, []sl{{emb.Name, -1, 4, 8}}},
		{"straddles two tensors", emb.End() - 4, 8, []sl{{emb.Name, -1, 124, 4}, {exps.Name, 0, 0, 4}}},
		{"straddles experts", exps.FileOffset + 60, 100, []sl{{exps.Name, 0, 60, 8}, {exps.Name, 1, 68, 68}, {exps.Name, 2, 136, 24}}},
		{"through padding", exps.End() - 2, norm.FileOffset - exps.End() + 4, []sl{{exps.Name, 2, 202, 2}, {"", -1, 0, norm.FileOffset - exps.End()}, {norm.Name, -1, 0, 2}}},
		{"past end", norm.End() - 2, 100, []sl{{norm.Name, -1, 10, 2}, {"", -1, 0, 98}}},
		{"empty", 5, 0, nil},
		{"whole file", 0, f.Size, nil}, // checked by sum below
	} {
		got := f.AppendSlices(nil, c.off, c.n)
		var sum int64
		pos := c.off
		for _, s := range got {
			if s.FileOffset != pos {
				t.Errorf("%s: slice at %d, want %d", c.desc, s.FileOffset, pos)
			}
			pos += s.Len
			sum += s.Len
		}
		if sum != max(c.n, 0) {
			t.Errorf("%s: slices cover %d bytes, want %d", c.desc, sum, c.n)
		}
		if c.want == nil {
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %d slices %+v, want %d", c.desc, len(got), got, len(c.want))
			continue
		}
		for i, s := range got {
			w := c.want[i]
			if name(s.Tensor) != w.name || s.Expert != w.expert || s.Offset != w.off || s.Len != w.n {
				t.Errorf("%s: slice %d = {%s e%d off %d len %d}, want %+v", c.desc, i, name(s.Tensor), s.Expert, s.Offset, s.Len, w)
			}
		}
	}
}

func TestLookupDoesNotAllocate(t *testing.T) {
	f := lookupFile(t)
	buf := make([]Slice, 0, 16)
	off := f.Tensors[1].FileOffset
	if n := testing.AllocsPerRun(1000, func() {
		f.Lookup(off + 70)
		buf = f.AppendSlices(buf[:0], off-100, 300)
	}); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

func TestOpenModelFindsAllShards(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "model")
	shards := [][]TensorInfo{
		{{Name: "token_embd.weight", Type: TypeF16, Dims: []int64{8, 4}}, {Name: "blk.0.attn_q.weight", Type: TypeF16, Dims: []int64{8, 8}}},
		{{Name: "blk.1.attn_q.weight", Type: TypeF16, Dims: []int64{8, 8}}},
		{{Name: "output.weight", Type: TypeF16, Dims: []int64{8, 4}}},
	}
	writeShards(t, prefix, shards, 4)
	for no := range shards {
		m, err := OpenModel(ShardPath(prefix, no, len(shards)))
		if err != nil {
			t.Fatalf("shard %d: %v", no, err)
		}
		if len(m.Files) != 3 || len(m.Tensors) != 4 {
			t.Fatalf("%d files, %d tensors", len(m.Files), len(m.Tensors))
		}
		for i, f := range m.Files {
			if f.Path != ShardPath(prefix, i, 3) || f.SplitNo != i || f.SplitCount != 3 {
				t.Errorf("file %d: %s split %d/%d", i, f.Path, f.SplitNo, f.SplitCount)
			}
		}
		q1 := m.Tensor("blk.1.attn_q.weight")
		if q1.Shard != 1 || q1.Path != ShardPath(prefix, 1, 3) || q1.Layer != 1 {
			t.Errorf("blk.1.attn_q: shard %d path %s", q1.Shard, q1.Path)
		}
		if h, ok := m.File(q1.Path).Lookup(q1.FileOffset); !ok || h.Tensor != q1 {
			t.Errorf("lookup in shard 1: %+v", h)
		}
		if m.Metadata() == nil || m.Size() <= 0 {
			t.Error("no metadata or size")
		}
	}
}

func TestOpenModelRejectsMissingOrForeignShard(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "m")
	shards := [][]TensorInfo{
		{{Name: "a", Type: TypeF32, Dims: []int64{1}}},
		{{Name: "b", Type: TypeF32, Dims: []int64{1}}},
	}
	writeShards(t, prefix, shards, 2)
	os.Remove(ShardPath(prefix, 1, 2))
	if _, err := OpenModel(ShardPath(prefix, 0, 2)); err == nil {
		t.Error("missing shard: no error")
	}
	// A shard of another split (wrong count) is refused.
	writeShards(t, prefix, shards, 2)
	other := filepath.Join(dir, "x")
	writeShards(t, other, [][]TensorInfo{shards[0], shards[1], {{Name: "c", Type: TypeF32, Dims: []int64{1}}}}, 3)
	if err := os.Rename(ShardPath(other, 1, 3), ShardPath(prefix, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenModel(ShardPath(prefix, 0, 2)); err == nil {
		t.Error("foreign shard: no error")
	}
	// Duplicate tensor across shards.
	writeShards(t, prefix, [][]TensorInfo{shards[0], shards[0]}, 2)
	if _, err := OpenModel(ShardPath(prefix, 1, 2)); err == nil {
		t.Error("duplicate tensor: no error")
	}
}

func TestOpenModelSingleFile(t *testing.T) {
	path := writeFile(t, &Writer{Tensors: []TensorInfo{{Name: "a", Type: TypeF32, Dims: []int64{1}}}}, nil)
	m, err := OpenModel(path)
	if err != nil || len(m.Files) != 1 || m.Tensors[0].Path != path {
		t.Fatalf("%+v %v", m, err)
	}
}

func writeShards(t testing.TB, prefix string, shards [][]TensorInfo, total int) {
	t.Helper()
	for i, ts := range shards {
		w := &Writer{
			Metadata: Metadata{
				{Key: "split.no", Value: uint16(i)},
				{Key: "split.count", Value: uint16(len(shards))},
				{Key: "split.tensors.count", Value: int32(total)},
			},
			Tensors: ts,
		}
		fd, err := os.Create(ShardPath(prefix, i, len(shards)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(fd, nil); err != nil {
			t.Fatal(err)
		}
		fd.Close()
	}
}

func BenchmarkLookup(b *testing.B) {
	spec := SynthSpec{Layers: 32, Embd: 256, FF: 512, Heads: 4, Experts: 8, Vocab: 1000, Type: TypeQ8_0}
	f, err := spec.Layout()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var hits int
	for i := 0; i < b.N; i++ {
		off := int64(uint64(i)*2654435761) % f.Size
		if _, ok := f.Lookup(off); ok {
			hits++
		}
	}
}

func BenchmarkAppendSlices(b *testing.B) {
	spec := SynthSpec{Layers: 32, Embd: 256, FF: 512, Heads: 4, Experts: 8, Vocab: 1000, Type: TypeQ8_0}
	f, err := spec.Layout()
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]Slice, 0, 64)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		off := int64(uint64(i)*2654435761) % f.Size &^ 4095
		buf = f.AppendSlices(buf[:0], off, 4096)
	}
}

func BenchmarkOpen(b *testing.B) {
	spec := SynthSpec{Layers: 32, Embd: 64, FF: 64, Heads: 2, Experts: 8, Vocab: 32000, Type: TypeF16}
	path := filepath.Join(b.TempDir(), "m.gguf")
	if _, err := CreateSynth(path, spec); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Open(path); err != nil {
			b.Fatal(err)
		}
	}
}

func TestExpertBiasSplitsAlongLastDimension(t *testing.T) {
	// gpt-oss stores per-expert biases as 2-D *_exps tensors {n_ff, n_expert}.
	f, err := (&Writer{Tensors: []TensorInfo{
		{Name: "blk.3.ffn_up_exps.bias", Type: TypeF32, Dims: []int64{16, 4}},
		{Name: "blk.3.ffn_up_shexp.weight", Type: TypeF32, Dims: []int64{16, 4}},
	}}).Layout()
	if err != nil {
		t.Fatal(err)
	}
	b := f.Tensors[0]
	if b.Experts != 4 || b.ExpertSize != 64 || b.Role != "ffn_up_exps" || b.Layer != 3 {
		t.Errorf("bias: %+v", b)
	}
	if h, _ := f.Lookup(b.FileOffset + 130); h.Expert != 2 {
		t.Errorf("offset 130 in expert %d, want 2", h.Expert)
	}
	if s, e := b.ExpertRange(3); s != b.FileOffset+192 || e != b.End() {
		t.Errorf("expert 3 range [%d,%d)", s, e)
	}
	if sh := f.Tensors[1]; sh.Experts != 0 {
		t.Errorf("shared expert tensor split into %d experts", sh.Experts)
	}
}

// An offset index is built from any tensor list (correlate builds one
// from a run's recorded table, with tensor ids): what it accepts, what it
// leaves out, and what it refuses.
func TestOffsetIndexFromAPlainTensorList(t *testing.T) {
	tests := []struct {
		name    string
		spans   []Span[uint32]
		wantErr string
		hits    map[int64]IndexHit[uint32] // offset → hit; absent from the map: no tensor
		misses  []int64
	}{
		{name: "unsorted input, experts and a gap",
			spans:  []Span[uint32]{{Tensor: 7, Offset: 300, Size: 30, Experts: 3, ExpertSize: 10}, {Tensor: 5, Offset: 100, Size: 100}},
			hits:   map[int64]IndexHit[uint32]{100: {5, -1, 0}, 199: {5, -1, 99}, 300: {7, 0, 0}, 319: {7, 1, 19}, 329: {7, 2, 29}},
			misses: []int64{-1, 99, 200, 299, 330}},
		{name: "a tensor of no bytes holds nothing",
			spans: []Span[uint32]{{Tensor: 1, Offset: 100, Size: 0}, {Tensor: 2, Offset: 100, Size: 8}},
			hits:  map[int64]IndexHit[uint32]{100: {2, -1, 0}, 107: {2, -1, 7}}, misses: []int64{108}},
		{name: "overlap", spans: []Span[uint32]{{Tensor: 1, Offset: 0, Size: 10}, {Tensor: 2, Offset: 9, Size: 10}}, wantErr: "overlap"},
		{name: "negative offset", spans: []Span[uint32]{{Tensor: 1, Offset: -1, Size: 10}}, wantErr: "bad byte range"},
		{name: "negative size", spans: []Span[uint32]{{Tensor: 1, Offset: 0, Size: -10}}, wantErr: "bad byte range"},
		{name: "range past the largest offset", spans: []Span[uint32]{{Tensor: 1, Offset: 1 << 62, Size: 1<<63 - 1}}, wantErr: "bad byte range"},
		{name: "experts without a size", spans: []Span[uint32]{{Tensor: 1, Offset: 0, Size: 10, Experts: 2}}, wantErr: "no expert size"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := NewOffsetIndex(tc.spans)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for off, want := range tc.hits {
				if h, ok := ix.Lookup(off); !ok || h != want {
					t.Errorf("Lookup(%d) = %+v %v, want %+v", off, h, ok, want)
				}
			}
			for _, off := range tc.misses {
				if h, ok := ix.Lookup(off); ok {
					t.Errorf("Lookup(%d) = %+v, want no tensor", off, h)
				}
			}
		})
	}
}

func TestOffsetIndexSlicesMarkBytesOutsideEveryTensor(t *testing.T) {
	ix, err := NewOffsetIndex([]Span[uint32]{{Tensor: 0, Offset: 100, Size: 20, Experts: 2, ExpertSize: 10}})
	if err != nil {
		t.Fatal(err)
	}
	got := ix.AppendSlices(nil, 95, 30)
	want := []IndexSlice[uint32]{
		{Outside: true, Expert: -1, FileOffset: 95, Len: 5},
		{Tensor: 0, Expert: 0, FileOffset: 100, Offset: 0, Len: 10},
		{Tensor: 0, Expert: 1, FileOffset: 110, Offset: 10, Len: 10},
		{Outside: true, Expert: -1, FileOffset: 120, Len: 5},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	buf := make([]IndexSlice[uint32], 0, 8)
	if n := testing.AllocsPerRun(1000, func() {
		ix.Lookup(105)
		buf = ix.AppendSlices(buf[:0], 95, 30)
	}); n != 0 {
		t.Errorf("%v allocations per lookup of a tensor id index", n)
	}
}
