package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
)

func synthModel(t *testing.T, spec gguf.SynthSpec) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "m.gguf")
	if _, err := gguf.CreateSynth(path, spec); err != nil {
		t.Fatal(err)
	}
	return path
}

var smallMoE = gguf.SynthSpec{Layers: 2, Embd: 64, FF: 64, Heads: 2, Experts: 4, ExpertsUsed: 2, Vocab: 300, Type: gguf.TypeQ8_0}

func TestInspectTable(t *testing.T) {
	path := synthModel(t, smallMoE)
	out, _, err := runCmd(t, "inspect", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"architecture:  llama", "layers:        2", "embd:          64", "experts:       4 (2 used per token)",
		"alignment:     32", "tensors:       23,", "Q8_0", "F32",
		"blk.1.ffn_down_exps.weight", "[64 64 4]", "ffn_down_exps",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestInspectCSVIsTheTensorTable(t *testing.T) {
	path := synthModel(t, smallMoE)
	out, _, err := runCmd(t, "inspect", "--format", "csv", path)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rows[0], ",") != "name,type,shape,offset,bytes,layer,role,experts" || len(rows) != 1+23 {
		t.Fatalf("header %v, %d rows", rows[0], len(rows))
	}
	f, _ := gguf.Open(path)
	for _, r := range rows[1:] {
		tn := f.Tensor(r[0])
		if tn == nil || r[3] != itoa(tn.FileOffset) || r[4] != itoa(tn.Size) {
			t.Errorf("row %v does not match the file", r)
		}
		// A tensor of no layer has an empty layer, not a -1.
		if tn != nil && (tn.Layer < 0) != (r[5] == "") {
			t.Errorf("row %v: layer %q, the tensor's %d", r, r[5], tn.Layer)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestInspectJSON(t *testing.T) {
	path := synthModel(t, smallMoE)
	out, _, err := runCmd(t, "inspect", "--format", "json", "--metadata", path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Summary struct {
			Architecture string
			Layers       int
			Experts      int
			Tensors      int
			FileSize     int64 `json:"file_size"`
			Types        []struct {
				Type  string
				Bytes int64
			}
		}
		Metadata map[string]any
		Tensors  []struct {
			Name    string
			Shape   []int64
			Offset  int64
			Bytes   int64
			Layer   *int
			Experts int
		}
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	st, _ := os.Stat(path)
	if got.Summary.Architecture != "llama" || got.Summary.Layers != 2 || got.Summary.Experts != 4 ||
		got.Summary.Tensors != 23 || got.Summary.FileSize != st.Size() || len(got.Tensors) != 23 {
		t.Errorf("summary %+v, %d tensors", got.Summary, len(got.Tensors))
	}
	if got.Metadata["general.architecture"] != "llama" {
		t.Errorf("metadata %v", got.Metadata["general.architecture"])
	}
	last := got.Tensors[len(got.Tensors)-1]
	// A tensor of no layer has a null layer, not a -1.
	if last.Name != "output.weight" || last.Layer != nil || len(last.Shape) != 2 || got.Tensors[1].Layer == nil {
		t.Errorf("last tensor %+v", last)
	}
}

func TestInspectSplitModelListsFiles(t *testing.T) {
	dir := t.TempDir()
	prefix := filepath.Join(dir, "s")
	for i := 0; i < 2; i++ {
		w := &gguf.Writer{
			Metadata: gguf.Metadata{
				{Key: "general.architecture", Value: "llama"},
				{Key: "split.no", Value: uint16(i)}, {Key: "split.count", Value: uint16(2)},
			},
			Tensors: []gguf.TensorInfo{{Name: []string{"token_embd.weight", "output.weight"}[i], Type: gguf.TypeF16, Dims: []int64{8, 4}}},
		}
		fd, err := os.Create(gguf.ShardPath(prefix, i, 2))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(fd, nil); err != nil {
			t.Fatal(err)
		}
		fd.Close()
	}
	out, _, err := runCmd(t, "inspect", "--format", "csv", gguf.ShardPath(prefix, 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `"token_embd.weight","F16","[8 4]",`) || !strings.Contains(out, "s-00001-of-00002.gguf") ||
		!strings.Contains(out, "s-00002-of-00002.gguf") || !strings.HasPrefix(out, "name,type,shape,offset,bytes,layer,role,experts,file\r\n") {
		t.Errorf("csv:\n%s", out)
	}
	out, _, _ = runCmd(t, "inspect", gguf.ShardPath(prefix, 0, 2))
	if !strings.Contains(out, "2 shards") {
		t.Errorf("table:\n%s", out)
	}
}

func TestInspectBadFileIsOneLineError(t *testing.T) {
	dir := t.TempDir()
	good := synthModel(t, smallMoE)
	raw, _ := os.ReadFile(good)
	for name, data := range map[string][]byte{
		"empty.gguf":     {},
		"text.gguf":      []byte("hello world, not a model"),
		"truncated.gguf": raw[:len(raw)/2],
		"header.gguf":    raw[:300],
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		_, _, err := runCmd(t, "inspect", p)
		if err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		msg := err.Error()
		if !strings.HasPrefix(msg, "inspect "+p+": gguf: ") || strings.Contains(msg, "\n") {
			t.Errorf("%s: error %q", name, msg)
		}
	}
	if _, _, err := runCmd(t, "inspect"); err == nil {
		t.Error("no file: no error")
	}
	if _, _, err := runCmd(t, "inspect", filepath.Join(dir, "missing.gguf")); err == nil {
		t.Error("missing file: no error")
	}
}
