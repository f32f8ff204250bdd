package output

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"text/tabwriter"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/units"
)

// Model writes what iocorr inspect shows of a GGUF model: in a table, a
// summary, the tensor types, with withMeta every metadata key, then a row
// per tensor; in CSV and JSON lines the tensor rows alone (a reader of
// either takes every line for a row); in JSON one object holding the
// summary, the metadata (withMeta) and the tensors.
func Model(w io.Writer, m *gguf.Model, format Format, withMeta bool) error {
	sum := summarize(m)
	split := len(m.Files) > 1
	switch format {
	case JSON:
		return inspectJSON(w, m, sum, split, withMeta)
	case CSV, JSONL:
		return tensorTable(w, m, format, split)
	}
	printSummary(w, sum)
	if withMeta {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tTYPE\tVALUE")
		for _, kv := range m.Metadata() {
			t, _ := kv.Type()
			fmt.Fprintf(tw, "%s\t%s\t%s\n", kv.Key, t, gguf.FormatValue(kv.Value))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	return tensorTable(w, m, format, split)
}

// modelSummary is the model-level part of inspect's output; its JSON
// field names are the json format's.
type modelSummary struct {
	Files        []string    `json:"files"`
	FileSize     int64       `json:"file_size"`
	Version      uint32      `json:"version"`
	Architecture string      `json:"architecture"`
	Name         string      `json:"name"`
	Layers       int64       `json:"layers"`
	Embd         int64       `json:"embd"`
	Experts      int64       `json:"experts"`
	ExpertsUsed  int64       `json:"experts_used"`
	Alignment    int64       `json:"alignment"`
	DataOffset   int64       `json:"data_offset"`
	Tensors      int         `json:"tensors"`
	TensorBytes  int64       `json:"tensor_bytes"`
	Types        []typeCount `json:"types"`
}

type typeCount struct {
	Type    string `json:"type"`
	Tensors int    `json:"tensors"`
	Bytes   int64  `json:"bytes"`
}

type modelTensor struct {
	Name       string  `json:"name"`
	Type       string  `json:"type"`
	Shape      []int64 `json:"shape"`
	File       string  `json:"file,omitempty"`
	Offset     int64   `json:"offset"`
	Bytes      int64   `json:"bytes"`
	Layer      *int    `json:"layer"` // null for a tensor of no layer
	Role       string  `json:"role"`
	Experts    int     `json:"experts"`
	ExpertSize int64   `json:"expert_bytes"`
}

func summarize(m *gguf.Model) modelSummary {
	md := m.Metadata()
	f0 := m.Files[0]
	arch := f0.Architecture()
	s := modelSummary{
		FileSize: m.Size(), Version: f0.Version, Architecture: arch,
		Alignment: f0.Alignment, DataOffset: f0.DataOffset, Tensors: len(m.Tensors),
	}
	for _, f := range m.Files {
		s.Files = append(s.Files, f.Path)
	}
	s.Name, _ = md.String("general.name")
	s.Layers, _ = md.Int(arch + ".block_count")
	s.Embd, _ = md.Int(arch + ".embedding_length")
	s.Experts, _ = md.Int(arch + ".expert_count")
	s.ExpertsUsed, _ = md.Int(arch + ".expert_used_count")
	byType := map[gguf.Type]*typeCount{}
	for _, t := range m.Tensors {
		s.TensorBytes += t.Size
		c := byType[t.Type]
		if c == nil {
			c = &typeCount{Type: t.Type.String()}
			byType[t.Type] = c
		}
		c.Tensors++
		c.Bytes += t.Size
	}
	for _, c := range byType {
		s.Types = append(s.Types, *c)
	}
	sort.Slice(s.Types, func(i, j int) bool {
		if s.Types[i].Bytes != s.Types[j].Bytes {
			return s.Types[i].Bytes > s.Types[j].Bytes
		}
		return s.Types[i].Type < s.Types[j].Type
	})
	return s
}

func printSummary(w io.Writer, s modelSummary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	if len(s.Files) == 1 {
		row("file", s.Files[0])
	} else {
		row("files", fmt.Sprintf("%d shards: %s … %s", len(s.Files), filepath.Base(s.Files[0]), filepath.Base(s.Files[len(s.Files)-1])))
	}
	row("file size", fmt.Sprintf("%s (%d bytes)", units.Bytes(float64(s.FileSize)), s.FileSize))
	row("gguf version", fmt.Sprint(s.Version))
	row("architecture", orDash(s.Architecture))
	row("name", orDash(s.Name))
	row("layers", fmt.Sprint(s.Layers))
	row("embd", fmt.Sprint(s.Embd))
	if s.Experts > 0 {
		row("experts", fmt.Sprintf("%d (%d used per token)", s.Experts, s.ExpertsUsed))
	}
	row("alignment", fmt.Sprint(s.Alignment))
	row("data offset", fmt.Sprint(s.DataOffset))
	row("tensors", fmt.Sprintf("%d, %s", s.Tensors, units.Bytes(float64(s.TensorBytes))))
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "TYPE\tTENSORS\tBYTES\t")
	for _, c := range s.Types {
		fmt.Fprintf(tw, "%s\t%d\t%s\t\n", c.Type, c.Tensors, units.Bytes(float64(c.Bytes)))
	}
	tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func tensorTable(w io.Writer, m *gguf.Model, format Format, split bool) error {
	cols := []Column{{Name: "name"}, {Name: "type"}, {Name: "shape"}, {Name: "offset"}, {Name: "bytes"},
		{Name: "layer", Type: Int32, Nullable: true}, {Name: "role"}, {Name: "experts"}}
	if split {
		cols = append(cols, Column{Name: "file"})
	}
	rw := New(w, format, cols)
	for _, t := range m.Tensors {
		layer := KeyOf(t.Layer)
		experts := Num(t.Experts)
		if t.Experts == 0 {
			experts.Human = "-"
		}
		cells := []Cell{Text(t.Name), Text(t.Type.String()), Text(t.Shape()), Num(t.FileOffset),
			Bytes(uint64(t.Size)), layer, Text(t.Role), experts}
		if split {
			cells = append(cells, Text(filepath.Base(t.Path)))
		}
		if err := rw.Row(cells...); err != nil {
			return err
		}
	}
	return rw.Close()
}

func inspectJSON(w io.Writer, m *gguf.Model, s modelSummary, split, withMeta bool) error {
	out := struct {
		Summary  modelSummary   `json:"summary"`
		Metadata map[string]any `json:"metadata,omitempty"`
		Tensors  []modelTensor  `json:"tensors"`
	}{Summary: s, Tensors: make([]modelTensor, 0, len(m.Tensors))}
	if withMeta {
		out.Metadata = map[string]any{}
		for _, kv := range m.Metadata() {
			v := kv.Value
			if a, ok := v.(gguf.Array); ok {
				v = a.Values
			}
			out.Metadata[kv.Key] = v
		}
	}
	for _, t := range m.Tensors {
		it := modelTensor{
			Name: t.Name, Type: t.Type.String(), Shape: t.Dims, Offset: t.FileOffset, Bytes: t.Size,
			Role: t.Role, Experts: t.Experts, ExpertSize: t.ExpertSize,
		}
		if t.Layer >= 0 {
			it.Layer = &t.Layer
		}
		if split {
			it.File = t.Path
		}
		out.Tensors = append(out.Tensors, it)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
