package ggml

import (
	"debug/dwarf"
	"debug/elf"
	"errors"
	"fmt"
)

// Layout holds the offsets the probes read in struct ggml_tensor and
// struct ggml_cgraph, plus the enum values they compare against.
type Layout struct {
	Source        string
	TensorType    int
	TensorNE      int
	TensorNB      int
	TensorOp      int
	TensorSrc     int
	TensorViewSrc int
	TensorData    int
	TensorName    int
	GraphNNodes   int
	GraphNodes    int
	TypeI32       int
	TensorBuffer  int
}

// BuiltinLayout is ggml's layout since the tensor struct gained
// src[GGML_MAX_SRC=10] and a 64-byte name (sizeof 336): measured on the
// node-llama-cpp 3.22 build (see LAB-NOTES) and checked against ggml.h.
// It is used when the target has no DWARF and is validated at run time
// (ValidateNode) so that a different layout is an error, not garbage.
var BuiltinLayout = Layout{
	Source:        "builtin",
	TensorType:    0,
	TensorNE:      16,
	TensorNB:      48,
	TensorOp:      80,
	TensorSrc:     152,
	TensorViewSrc: 232,
	TensorData:    248,
	TensorName:    256,
	GraphNNodes:   4,
	GraphNodes:    16,
	TypeI32:       26,
	TensorBuffer:  8,
}

// Map renders a layout for the run metadata.
func (l Layout) Map() (tensor, graph map[string]int) {
	tensor = map[string]int{
		"type": l.TensorType, "ne": l.TensorNE, "nb": l.TensorNB, "op": l.TensorOp,
		"src": l.TensorSrc, "view_src": l.TensorViewSrc, "data": l.TensorData, "name": l.TensorName,
		"buffer": l.TensorBuffer,
	}
	graph = map[string]int{"n_nodes": l.GraphNNodes, "nodes": l.GraphNodes}
	return tensor, graph
}

// LayoutFromDWARF reads the layout from a library's debug info. It
// returns an error wrapping ErrNoDWARF when the file has none (the
// prebuilt libraries ship without it).
func LayoutFromDWARF(path string) (Layout, error) {
	f, err := elf.Open(path)
	if err != nil {
		return Layout{}, err
	}
	defer f.Close()
	d, err := f.DWARF()
	if err != nil {
		return Layout{}, fmt.Errorf("%s: %w", path, ErrNoDWARF)
	}
	lay := BuiltinLayout
	lay.Source = "dwarf:" + path
	found := map[string]bool{}
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagStructType {
			continue
		}
		name, _ := e.Val(dwarf.AttrName).(string)
		if (name != "ggml_tensor" && name != "ggml_cgraph") || found[name] || !e.Children {
			continue
		}
		fields := map[string]int{}
		for {
			c, err := r.Next()
			if err != nil || c == nil || c.Tag == 0 {
				break
			}
			if c.Tag == dwarf.TagMember {
				fn, _ := c.Val(dwarf.AttrName).(string)
				if off, ok := c.Val(dwarf.AttrDataMemberLoc).(int64); ok {
					fields[fn] = int(off)
				}
			}
			if c.Children {
				r.SkipChildren()
			}
		}
		if len(fields) == 0 {
			continue // a declaration
		}
		found[name] = true
		get := func(f string, dst *int) error {
			v, ok := fields[f]
			if !ok {
				return fmt.Errorf("%s: struct %s has no field %s", path, name, f)
			}
			*dst = v
			return nil
		}
		var errs []error
		if name == "ggml_tensor" {
			errs = append(errs, get("type", &lay.TensorType), get("ne", &lay.TensorNE), get("nb", &lay.TensorNB),
				get("op", &lay.TensorOp), get("src", &lay.TensorSrc), get("view_src", &lay.TensorViewSrc),
				get("data", &lay.TensorData), get("name", &lay.TensorName), get("buffer", &lay.TensorBuffer))
		} else {
			errs = append(errs, get("n_nodes", &lay.GraphNNodes), get("nodes", &lay.GraphNodes))
		}
		if err := errors.Join(errs...); err != nil {
			return Layout{}, err
		}
	}
	if !found["ggml_tensor"] || !found["ggml_cgraph"] {
		return Layout{}, fmt.Errorf("%s: DWARF lacks struct ggml_tensor or ggml_cgraph: %w", path, ErrNoDWARF)
	}
	return lay, nil
}

// ErrNoDWARF says a file has no usable debug info.
var ErrNoDWARF = errors.New("no DWARF debug info")
