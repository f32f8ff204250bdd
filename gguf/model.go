package gguf

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
)

// Model is a whole model: one file, or every shard of a split model
// (llama.cpp's gguf-split writes NAME-00001-of-00003.gguf ... with
// split.no and split.count in each shard's metadata).
type Model struct {
	// Files is the shards in split order; a single file for unsplit models.
	Files []*File
	// Tensors is every tensor, shard by shard, each in header order.
	Tensors []*Tensor

	byName map[string]*Tensor
}

var shardName = regexp.MustCompile(`^(.*)-(\d{5})-of-(\d{5})\.gguf$`)

// ShardPath is llama.cpp's file name for shard no (0-based) of count:
// "prefix-00002-of-00003.gguf" for no=1, count=3.
func ShardPath(prefix string, no, count int) string {
	return fmt.Sprintf("%s-%05d-of-%05d.gguf", prefix, no+1, count)
}

// OpenModel opens the model at path. Given any shard of a split model it
// finds and parses all shards, checking that they belong together.
func OpenModel(path string) (*Model, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	if f.SplitCount <= 1 {
		return newModel([]*File{f})
	}
	m := shardName.FindStringSubmatch(path)
	if m == nil {
		return nil, newError(ErrSplit, -1, "%s is shard %d of %d (split.no, split.count) but its name does not end in -NNNNN-of-NNNNN.gguf, so the other shards cannot be found",
			filepath.Base(path), f.SplitNo+1, f.SplitCount)
	}
	prefix := m[1]
	nameNo, _ := strconv.Atoi(m[2])
	nameCount, _ := strconv.Atoi(m[3])
	if nameNo != f.SplitNo+1 || nameCount != f.SplitCount {
		return nil, newError(ErrSplit, -1, "%s: name says shard %d of %d but split.no/split.count say %d of %d",
			filepath.Base(path), nameNo, nameCount, f.SplitNo+1, f.SplitCount)
	}
	files := make([]*File, f.SplitCount)
	files[f.SplitNo] = f
	for i := range files {
		if files[i] != nil {
			continue
		}
		p := ShardPath(prefix, i, f.SplitCount)
		s, err := Open(p)
		if err != nil {
			if e, ok := err.(*Error); ok {
				return nil, &Error{Offset: e.Offset, Msg: filepath.Base(p) + ": " + e.Msg, Err: e.Err}
			}
			return nil, fmt.Errorf("gguf: shard %d of %d: %w", i+1, f.SplitCount, err)
		}
		if s.SplitCount != f.SplitCount || s.SplitNo != i {
			return nil, newError(ErrSplit, -1, "%s: split.no/split.count say shard %d of %d, want %d of %d",
				filepath.Base(p), s.SplitNo+1, s.SplitCount, i+1, f.SplitCount)
		}
		files[i] = s
	}
	mod, err := newModel(files)
	if err != nil {
		return nil, err
	}
	if want, ok := files[0].Metadata.Int("split.tensors.count"); ok && want != int64(len(mod.Tensors)) {
		return nil, newError(ErrSplit, -1, "split.tensors.count is %d but the %d shards hold %d tensors", want, len(files), len(mod.Tensors))
	}
	return mod, nil
}

// NewModel makes a model of already-parsed files (shards in order).
func NewModel(files ...*File) (*Model, error) { return newModel(files) }

func newModel(files []*File) (*Model, error) {
	m := &Model{Files: files, byName: map[string]*Tensor{}}
	for i, f := range files {
		for _, t := range f.Tensors {
			if prev, dup := m.byName[t.Name]; dup {
				return nil, newError(ErrSplit, -1, "tensor %q is in both %s and %s", t.Name, filepath.Base(prev.Path), filepath.Base(f.Path))
			}
			t.Shard = i
			t.Path = f.Path
			m.byName[t.Name] = t
			m.Tensors = append(m.Tensors, t)
		}
	}
	return m, nil
}

// Metadata is the first shard's metadata, which carries the model's
// hyperparameters and tokenizer in split models.
func (m *Model) Metadata() Metadata { return m.Files[0].Metadata }

// Tensor returns the tensor called name, or nil.
func (m *Model) Tensor(name string) *Tensor { return m.byName[name] }

// File returns the shard with the given path, or nil.
func (m *Model) File(path string) *File {
	for _, f := range m.Files {
		if f.Path == path {
			return f
		}
	}
	return nil
}

// Size is the total size of all files.
func (m *Model) Size() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}
