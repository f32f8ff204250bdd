package gguf_test

import (
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"

	"github.com/iocorr/iocorr/gguf"
)

// A file offset reported by the kernel is mapped to a tensor and expert.
func ExampleFile_Lookup() {
	dir, _ := os.MkdirTemp("", "gguf-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "m.gguf")
	spec := gguf.SynthSpec{Layers: 2, Embd: 64, FF: 64, Heads: 2, Experts: 4, ExpertsUsed: 2, Vocab: 300, Type: gguf.TypeQ8_0}
	if _, err := gguf.CreateSynth(path, spec); err != nil {
		log.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		log.Fatal(err)
	}
	up := f.Tensor("blk.1.ffn_up_exps.weight")
	h, ok := f.Lookup(up.FileOffset + 2*up.ExpertSize + 10)
	fmt.Println(ok, h.Tensor.Name, "layer", h.Tensor.Layer, "role", h.Tensor.Role, "expert", h.Expert)

	// A 4 KiB page that starts in the header and ends in the first tensor.
	var slices []gguf.Slice
	slices = f.AppendSlices(slices[:0], f.DataOffset-100, 4096)
	for _, s := range slices {
		name := "(not a tensor)"
		if s.Tensor != nil {
			name = s.Tensor.Name
		}
		fmt.Println(name, s.Len)
	}
	// Output:
	// true blk.1.ffn_up_exps.weight layer 1 role ffn_up_exps expert 2
	// (not a tensor) 100
	// token_embd.weight 3996
}

// The Writer streams tensor data from a callback.
func ExampleWriter() {
	w := &gguf.Writer{
		Metadata: gguf.Metadata{
			{Key: "general.architecture", Value: "llama"},
			{Key: "general.alignment", Value: uint32(64)},
			{Key: "tokenizer.ggml.tokens", Value: gguf.Array{Elem: gguf.ValueString, Values: []string{"<unk>", "<s>"}}},
		},
		Tensors: []gguf.TensorInfo{
			{Name: "token_embd.weight", Type: gguf.TypeF16, Dims: []int64{8, 2}},
			{Name: "blk.0.attn_q.weight", Type: gguf.TypeQ8_0, Dims: []int64{32, 8}},
		},
	}
	layout, err := w.Layout()
	if err != nil {
		log.Fatal(err)
	}
	n, err := w.Write(io.Discard, func(t *gguf.Tensor, out io.Writer) error {
		_, err := out.Write(make([]byte, t.Size)) // real data goes here
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range layout.Tensors {
		fmt.Println(t.Name, t.Type, t.Shape(), t.Size, t.FileOffset%64 == 0)
	}
	fmt.Println(n == layout.Size)
	// Output:
	// token_embd.weight F16 [8 2] 32 true
	// blk.0.attn_q.weight Q8_0 [32 8] 272 true
	// true
}
