package bpf

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf/link"

	"github.com/iocorr/iocorr/ggml"
)

// Layout returns the layout in use.
func (t *Tracer) Layout() ggml.Layout {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.layout
}

// layoutBPF is l as the programs' layout variable holds it.
func layoutBPF(l ggml.Layout) IocorrGgmlLayout {
	return IocorrGgmlLayout{
		T_type: uint32(l.TensorType), T_ne: uint32(l.TensorNE), T_nb: uint32(l.TensorNB), T_op: uint32(l.TensorOp),
		T_src: uint32(l.TensorSrc), T_viewSrc: uint32(l.TensorViewSrc), T_data: uint32(l.TensorData),
		T_name: uint32(l.TensorName), G_nNodes: uint32(l.GraphNNodes), G_nodes: uint32(l.GraphNodes),
		TypeI32: uint32(l.TypeI32), T_buffer: uint32(l.TensorBuffer),
	}
}

// useLayout switches the probes to a layout read from a library's DWARF,
// before any uprobe that reads it is attached to that library.
func (t *Tracer) useLayout(l ggml.Layout) error {
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
	if err := t.objs.Layout.Set(layoutBPF(l)); err != nil {
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
