package bpf

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"
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
}

// builtinLayout is ggml's layout since the tensor struct gained
// src[GGML_MAX_SRC=10] and a 64-byte name (sizeof 336): measured on the
// node-llama-cpp 3.22 build (see LAB-NOTES) and checked against ggml.h.
// It is used when the target has no DWARF and is validated at run time
// (ValidateNode) so that a different layout is an error, not garbage.
var builtinLayout = Layout{
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
}

// Layout returns the layout in use.
func (t *Tracer) Layout() Layout {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.layout
}

func (l Layout) bpf() IocorrGgmlLayout {
	return IocorrGgmlLayout{
		T_type: uint32(l.TensorType), T_ne: uint32(l.TensorNE), T_nb: uint32(l.TensorNB), T_op: uint32(l.TensorOp),
		T_src: uint32(l.TensorSrc), T_viewSrc: uint32(l.TensorViewSrc), T_data: uint32(l.TensorData),
		T_name: uint32(l.TensorName), G_nNodes: uint32(l.GraphNNodes), G_nodes: uint32(l.GraphNodes),
		TypeI32: uint32(l.TypeI32),
	}
}

// useLayout switches the probes to a layout read from a library's DWARF,
// before any uprobe that reads it is attached to that library.
func (t *Tracer) useLayout(l Layout) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.layoutFixed {
		if l != t.layout && l.Source != t.layout.Source {
			// Two libraries that disagree about struct ggml_tensor cannot
			// both be read right by one set of programs.
			a, b := l, t.layout
			a.Source, b.Source = "", ""
			if a != b {
				return fmt.Errorf("ggml layout of %s differs from %s", l.Source, t.layout.Source)
			}
		}
		return nil
	}
	if err := t.objs.Layout.Set(l.bpf()); err != nil {
		return fmt.Errorf("setting ggml layout: %w", err)
	}
	t.layout, t.layoutFixed = l, true
	return nil
}

// keepLink holds an attached link until Close; one whose program reads
// ggml structs is closed at once when the layout was found wrong.
func (t *Tracer) keepLink(l link.Link, readsLayout bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case !readsLayout:
		t.links = append(t.links, l)
	case t.layoutOff:
		l.Close()
	default:
		t.layoutLinks = append(t.layoutLinks, l)
	}
}

// DisableLayoutProbes detaches every probe that reads ggml structs with
// the layout — graph_compute, get_rows, the op probes — and keeps later
// libraries from getting them: a layout that failed validation against
// the target would read garbage as graphs, expert ids and ops. Tokens
// (llama_decode) and kernel events go on.
func (t *Tracer) DisableLayoutProbes() error {
	t.mu.Lock()
	links := t.layoutLinks
	t.layoutLinks, t.layoutOff = nil, true
	t.mu.Unlock()
	var errs []error
	for _, l := range links {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// Map renders a layout for the run metadata.
func (l Layout) Map() (tensor, graph map[string]int) {
	tensor = map[string]int{
		"type": l.TensorType, "ne": l.TensorNE, "nb": l.TensorNB, "op": l.TensorOp,
		"src": l.TensorSrc, "view_src": l.TensorViewSrc, "data": l.TensorData, "name": l.TensorName,
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
	lay := builtinLayout
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
				get("data", &lay.TensorData), get("name", &lay.TensorName))
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

// OpNamesFromELF reads ggml's op name table (the GGML_OP_NAME array of
// string pointers in libggml-base) from a library file, so op numbers are
// named as that very build numbers them. The array lives in relocated
// read-only data: each entry's string address is the addend of its
// R_X86_64_RELATIVE relocation.
func OpNamesFromELF(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: reading symbols: %w", path, err)
	}
	var sym *elf.Symbol
	for i := range syms {
		if syms[i].Name == "GGML_OP_NAME" && syms[i].Size > 0 {
			sym = &syms[i]
			break
		}
	}
	if sym == nil {
		return nil, fmt.Errorf("%s: no GGML_OP_NAME symbol", path)
	}
	if f.Machine != elf.EM_X86_64 || sym.Size%8 != 0 || sym.Size > 8*4096 {
		return nil, fmt.Errorf("%s: GGML_OP_NAME of %d bytes on %v not understood", path, sym.Size, f.Machine)
	}
	n := int(sym.Size / 8)
	addends := make([]uint64, n)
	have := 0
	for _, s := range f.Sections {
		if s.Type != elf.SHT_RELA {
			continue
		}
		data, err := s.Data()
		if err != nil {
			continue
		}
		for off := 0; off+24 <= len(data); off += 24 {
			roff := binary.LittleEndian.Uint64(data[off:])
			info := binary.LittleEndian.Uint64(data[off+8:])
			add := binary.LittleEndian.Uint64(data[off+16:])
			if elf.R_X86_64(info&0xffffffff) != elf.R_X86_64_RELATIVE || roff < sym.Value || roff >= sym.Value+sym.Size {
				continue
			}
			i := int((roff - sym.Value) / 8)
			if addends[i] == 0 {
				have++
			}
			addends[i] = add
		}
	}
	if have != n {
		return nil, fmt.Errorf("%s: only %d of %d GGML_OP_NAME entries are relocated", path, have, n)
	}
	names := make([]string, n)
	for i, a := range addends {
		s, err := cString(f, a)
		if err != nil {
			return nil, fmt.Errorf("%s: GGML_OP_NAME[%d]: %w", path, i, err)
		}
		names[i] = s
	}
	if names[0] != "NONE" {
		return nil, fmt.Errorf("%s: GGML_OP_NAME[0] is %q, not NONE", path, names[0])
	}
	return names, nil
}

func cString(f *elf.File, vaddr uint64) (string, error) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || vaddr < p.Vaddr || vaddr >= p.Vaddr+p.Filesz {
			continue
		}
		buf := make([]byte, 64)
		n, err := p.ReadAt(buf, int64(vaddr-p.Vaddr))
		if n == 0 && err != nil {
			return "", err
		}
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			return string(buf[:i]), nil
		}
		return "", fmt.Errorf("string at %#x not terminated", vaddr)
	}
	return "", fmt.Errorf("address %#x not in a loaded segment", vaddr)
}

// CString converts a fixed-size C char array from an event to a string.
func CString(b []int8) string {
	for i, c := range b {
		if c == 0 {
			return string(int8sToBytes(b[:i]))
		}
	}
	return string(int8sToBytes(b))
}

func int8sToBytes(b []int8) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		out[i] = byte(c)
	}
	return out
}

// Weight is what a traced model's GGUF says about a tensor, for
// ValidateNode: its ggml type, shape and strides (ne, nb; unused
// dimensions 1) and its file offset.
type Weight struct {
	Type    uint32
	Ne, Nb  [4]uint64
	FileOff uint64
}

// ValidateNode checks that a node event read with the layout looks like
// ggml data: printable, terminated names, a known op, a sane type and
// shape — and, for a weight the kernel found in a file, that it is a
// tensor of a traced model (weight looks it up by name) with the GGUF's
// type, ne, nb and offset. The first bad node of a run means the layout
// is wrong for the target and its data must not be trusted: names, ops
// and shapes read at wrong offsets cannot all agree with the model by
// chance.
func ValidateNode(e *IocorrNodeEvent, nOps int, weight func(name string) (Weight, bool)) error {
	for _, n := range []struct {
		what string
		b    []int8
	}{{"node name", e.NodeName[:]}, {"weight name", e.WeightName[:]}} {
		end := -1
		for i, c := range n.b {
			if c == 0 {
				end = i
				break
			}
			if c < 0x20 || c > 0x7e {
				return fmt.Errorf("%s has byte %#x at %d", n.what, byte(c), i)
			}
		}
		if end < 0 {
			return fmt.Errorf("%s is not NUL-terminated", n.what)
		}
	}
	if nOps > 0 && int(e.Op) >= nOps {
		return fmt.Errorf("op %d out of range (the target has %d ops)", e.Op, nOps)
	}
	if e.WeightType > 64 {
		return fmt.Errorf("weight type %d out of range", e.WeightType)
	}
	for i, ne := range e.WeightNe {
		if ne == 0 || ne > 1<<40 {
			return fmt.Errorf("weight ne[%d] = %d", i, ne)
		}
	}
	if e.Ino == 0 || weight == nil {
		return nil // not in a file (KV cache, a repacked copy): nothing to compare with
	}
	name := CString(e.WeightName[:])
	w, ok := weight(name)
	if !ok {
		return fmt.Errorf("weight %q, read from a model file, is no tensor of the traced models", name)
	}
	switch {
	case e.WeightType != w.Type:
		return fmt.Errorf("weight %s has type %d, the GGUF says %d", name, e.WeightType, w.Type)
	case e.WeightNe != w.Ne:
		return fmt.Errorf("weight %s has ne %v, the GGUF says %v", name, e.WeightNe, w.Ne)
	case e.WeightNb != w.Nb:
		return fmt.Errorf("weight %s has nb %v, the GGUF's type and shape give %v", name, e.WeightNb, w.Nb)
	case e.FileOff != w.FileOff:
		return fmt.Errorf("weight %s is at file offset %d, the GGUF says %d", name, e.FileOff, w.FileOff)
	}
	return nil
}
