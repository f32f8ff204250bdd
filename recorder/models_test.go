package recorder

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/rundir"
)

// ggufFile writes a small real model to dir/name.
func ggufFile(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := gguf.WriteSynth(f, gguf.SynthSpec{Layers: 1, Embd: 8, FF: 8, Heads: 2, Vocab: 259}); err != nil {
		t.Fatal(err)
	}
	return path
}

// plainFile writes a file that is no model to dir/name.
func plainFile(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("not a model, though named like one"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileID(t *testing.T, path string) (uint32, uint64) {
	t.Helper()
	id, err := blockdev.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return id.Dev, id.Ino
}

func TestModelsAddReadsAModelsTensorTableOnceAndTellsTheTracer(t *testing.T) {
	path := ggufFile(t, t.TempDir(), "m.gguf")
	var told []string
	ms := newModels(func(string) {}, func(mf *rundir.ModelFile) error { told = append(told, mf.Path); return nil })
	mf, err := ms.add(path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := gguf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mf.Size != st.Size() || mf.Pages != (st.Size()+4095)/4096 || mf.DataOffset != f.DataOffset || len(mf.Tensors) != len(f.Tensors) {
		t.Fatalf("size %d, pages %d, data at %d, %d tensors; want %d, %d, %d, %d",
			mf.Size, mf.Pages, mf.DataOffset, len(mf.Tensors), st.Size(), (st.Size()+4095)/4096, f.DataOffset, len(f.Tensors))
	}
	for i, tn := range f.Tensors {
		if got := mf.Tensors[i]; got.Name != tn.Name || got.Offset != tn.FileOffset || got.Size != tn.Size {
			t.Errorf("tensor %d: %s at %d, %d bytes; want %s at %d, %d", i, got.Name, got.Offset, got.Size, tn.Name, tn.FileOffset, tn.Size)
		}
	}
	// Through another name, the same file is the same model.
	link := filepath.Join(t.TempDir(), "link.gguf")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	again, err := ms.add(link)
	if err != nil || again != mf {
		t.Fatalf("added again: %p, %v; want the first %p", again, err, mf)
	}
	if !reflect.DeepEqual(told, []string{path}) || len(ms.files()) != 1 {
		t.Errorf("the tracer was told %q, %d files known; want the model once", told, len(ms.files()))
	}
}

func TestModelsAddRefusesWhatCannotBeAModel(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name  string
		path  string
		onNew func(*rundir.ModelFile) error
		want  string
	}{
		{"no such file", filepath.Join(dir, "none.gguf"), nil, "no such file"},
		{"not a GGUF file", plainFile(t, dir, "plain.gguf"), nil, "plain.gguf"},
		{"the tracer refuses it", ggufFile(t, dir, "m.gguf"), func(*rundir.ModelFile) error { return errors.New("map full") }, "map full"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := newModels(func(string) {}, tc.onNew)
			if _, err := ms.add(tc.path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if len(ms.files()) != 0 || ms.has(tc.path) {
				t.Fatal("a refused file became a model")
			}
		})
	}
}

// mapped runs for every file a traced process maps; decided spares the
// recorder naming a file it settled already, known runs for every fault.
func TestModelsMappedDecidesEachFileOnceAsAModelOrNot(t *testing.T) {
	dir := t.TempDir()
	model, plain, refused := ggufFile(t, dir, "m.gguf"), plainFile(t, dir, "libfoo.so"), ggufFile(t, dir, "refused.gguf")
	tests := []struct {
		name           string
		path           string // "" when the recorder could not name it
		named          bool   // named at the first mapping
		isModel, isNew bool
		thenModel      bool // known as a model afterwards
		thenDecided    bool
		warned         bool
	}{
		{"a GGUF file becomes a model", model, true, true, true, true, true, false},
		{"a file of no model is decided", plain, true, false, false, false, true, false},
		{"a GGUF file the tracer refuses is decided and said", refused, true, false, false, false, true, true},
		{"an unnamed file stays undecided", plain, false, false, false, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var said warnings
			ms := newModels(said.warn, func(mf *rundir.ModelFile) error {
				if mf.Path == refused {
					return errors.New("the tracer's file map is full")
				}
				return nil
			})
			dev, ino := fileID(t, tc.path)
			path := tc.path
			if !tc.named {
				path = ""
			}
			if ms.decided(dev, ino) {
				t.Fatal("decided before its first mapping")
			}
			if isModel, isNew := ms.mapped(dev, ino, path); isModel != tc.isModel || isNew != tc.isNew {
				t.Fatalf("mapped: model %v, new %v; want %v, %v", isModel, isNew, tc.isModel, tc.isNew)
			}
			if ms.known(dev, ino) != tc.thenModel || ms.has(tc.path) != tc.thenModel || ms.decided(dev, ino) != tc.thenDecided {
				t.Fatalf("known %v, has %v, decided %v; want %v, %v, %v", ms.known(dev, ino), ms.has(tc.path), ms.decided(dev, ino), tc.thenModel, tc.thenModel, tc.thenDecided)
			}
			if (len(said) > 0) != tc.warned {
				t.Errorf("warnings %q", said)
			}
			// A second mapping, named or not, finds it as decided and
			// is never new.
			if isModel, isNew := ms.mapped(dev, ino, ""); isModel != tc.thenModel || isNew {
				t.Errorf("mapped again: model %v, new %v; want %v, false", isModel, isNew, tc.thenModel)
			}
		})
	}
}

func TestModelsFilesAreCopiesWithTheirResidency(t *testing.T) {
	dir := t.TempDir()
	ms := newModels(func(string) {}, nil)
	for _, n := range []string{"a.gguf", "b.gguf"} {
		if _, err := ms.add(ggufFile(t, dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	ms.setResident(1, 3)
	ms.setResidentEnd(0, &rundir.PageMap{Resident: 2})
	fs := ms.files()
	fs[0].Path = "changed by the caller"
	fs = ms.files()
	if filepath.Base(fs[0].Path) != "a.gguf" || filepath.Base(fs[1].Path) != "b.gguf" {
		t.Fatalf("files %s, %s; want a.gguf, b.gguf in the order added", fs[0].Path, fs[1].Path)
	}
	if fs[1].ResidentBefore != 3 || fs[0].ResidentEnd == nil || fs[0].ResidentEnd.Resident != 2 || fs[0].ResidentBefore != 0 || fs[1].ResidentEnd != nil {
		t.Errorf("residency before %d, %d; at the end %v, %v", fs[0].ResidentBefore, fs[1].ResidentBefore, fs[0].ResidentEnd, fs[1].ResidentEnd)
	}
}

func TestCandidatesInFindTheModelsACommandLineNames(t *testing.T) {
	dir := t.TempDir()
	model, other := ggufFile(t, dir, "m.gguf"), ggufFile(t, dir, "other.gguf")
	plain := plainFile(t, dir, "plain.gguf")
	// Before the start, a relative name is the recorder's: the command
	// starts in its directory (record --cold -- llama-cli -m m.gguf).
	t.Chdir(dir)
	tests := []struct {
		name  string
		argv  []string
		dir   string
		known func(string) bool
		want  []string
	}{
		{"-m and its value", []string{"llama-cli", "-m", model, "-p", "hi"}, "", nil, []string{model}},
		{"--model=value", []string{"llama-cli", "--model=" + model}, "", nil, []string{model}},
		{"inside a shell's command line, quoted", []string{"sh", "-c", "llama-cli -m '" + model + "' -n 4"}, "", nil, []string{model}},
		{"each file once", []string{"llama-cli", "-m", model, "--model=" + model, "-md", other}, "", nil, []string{model, other}},
		{"relative to the process's directory", []string{"llama-cli", "-m", "m.gguf"}, dir, nil, []string{model}},
		{"relative to the recorder's directory before the start", []string{"llama-cli", "-m", "m.gguf"}, "", nil, []string{model}},
		{"a file that is no model", []string{"llama-cli", "-m", plain, "-f", "/no/such.gguf"}, "", nil, nil},
		{"a model known already is not read", []string{"llama-cli", "-m", model, "-md", other}, "", func(p string) bool { return p == model }, []string{other}},
		{"the program alone", []string{model}, "", nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := candidatesIn(tc.argv, tc.dir, tc.known); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("candidates %q, want %q", got, tc.want)
			}
		})
	}
}
