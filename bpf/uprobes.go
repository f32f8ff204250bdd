package bpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/iocorr/iocorr/ggml"
)

// AttachUser attaches the user-space probes to the llama/ggml symbols an
// ELF file defines; a file without any is left alone. Uprobes are bound
// to the file, not to a process, so this works before the file is mapped
// and for every process that maps it; the programs filter by traced pid.
// Calling it again for the same file does nothing.
func (t *Tracer) AttachUser(path string) ([]Probe, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("resolving %s: %w", path, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(real, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", real, err)
	}
	id := fileID{dev: st.Dev, ino: st.Ino}
	t.mu.Lock()
	done := t.attached[id]
	t.attached[id] = true
	t.mu.Unlock()
	if done {
		return nil, nil
	}

	syms, err := ggml.FileSymbols(real)
	probeSyms, opSyms := syms.Probe, syms.Ops
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return nil, nil // not an ELF file: nothing to probe
		}
		return nil, fmt.Errorf("reading symbols of %s: %w", real, err)
	}
	if syms.HasOpNames {
		if names, err := syms.OpNames(real); err == nil {
			t.mu.Lock()
			t.opNames, t.opSource = names, real
			t.mu.Unlock()
		} else {
			t.addProbe(Probe{Kind: "elf", Target: real, Symbol: ggml.SymOpNames, Error: err.Error()})
		}
	}
	if len(probeSyms) == 0 && (!t.opts.Probes.Ops || len(opSyms) == 0) {
		return nil, nil
	}
	// A library built with debug info tells the exact layout; the
	// prebuilt ones have none, and the built-in table stands (it is
	// checked against what the probes read, see ggml.ValidateNode).
	if len(probeSyms) > 0 {
		if lay, err := ggml.LayoutFromDWARF(real); err == nil {
			if err := t.useLayout(lay); err != nil {
				return nil, err
			}
		} else if !errors.Is(err, ggml.ErrNoDWARF) {
			t.addProbe(Probe{Kind: "dwarf", Target: real, Error: err.Error()})
		}
	}
	ex, err := link.OpenExecutable(real)
	if err != nil {
		return nil, fmt.Errorf("opening %s for uprobes: %w", real, err)
	}
	t.mu.Lock()
	t.offsets[real], t.pads[real], t.emulated[real] = syms.Offset, syms.Pad, syms.Emulated
	t.mu.Unlock()

	var out []Probe
	var errs []error
	attach := func(kind, sym string, prog *ebpf.Program, cookie uint64) {
		p, err := t.attachUprobe(ex, real, kind, sym, syms.Offset[sym], syms.Pad[sym], prog, cookie)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, p)
	}
	deferOps := false
	for _, sym := range probeSyms {
		switch sym {
		case ggml.SymDecode:
			attach("uprobe", sym, t.objs.DecodeBegin, 0)
			attach("uretprobe", sym, t.objs.DecodeEnd, 0)
		case ggml.SymGraphCompute:
			t.mu.Lock()
			file := uint32(len(t.files))
			t.files = append(t.files, real)
			t.mu.Unlock()
			attach("uprobe", sym, t.objs.GraphCompute, uint64(file))
			attach("uretprobe", sym, t.objs.GraphComputeRet, 0)
			// node-llama-cpp loads every CPU backend variant and runs one:
			// its ops are probed when its first graph says it runs.
			if t.opts.Probes.Ops && len(opSyms) > 0 && out[len(out)-1].Error == "" {
				want := uint32(1)
				if err := t.objs.OpsPending.Put(file, want); err == nil {
					t.mu.Lock()
					t.pendingOps[file] = opSyms
					t.mu.Unlock()
					deferOps = true
				}
			}
		case ggml.SymGetRows:
			attach("uprobe", sym, t.objs.GetRowsBegin, 0)
		case ggml.SymTensorSet:
			attach("uprobe", sym, t.objs.TensorSet, 0)
		case ggml.SymBufferName:
			attach("uprobe", sym, t.objs.BufferName, 0)
			attach("uretprobe", sym, t.objs.BufferNameRet, 0)
		}
	}
	if !deferOps {
		out = append(out, t.attachOps(ex, real, opSyms)...)
	}
	return out, errors.Join(errs...)
}

// AttachPendingOps attaches the op probes of the file whose graph_compute
// probe has cookie file (graph_event.file), if they wait for its first
// graph; it reports whether there were any.
func (t *Tracer) AttachPendingOps(file uint32) (bool, error) {
	t.mu.Lock()
	syms, ok := t.pendingOps[file]
	delete(t.pendingOps, file)
	path := ""
	if int(file) < len(t.files) {
		path = t.files[file]
	}
	t.mu.Unlock()
	if !ok || path == "" {
		return false, nil
	}
	ex, err := link.OpenExecutable(path)
	if err != nil {
		return true, fmt.Errorf("opening %s for op probes: %w", path, err)
	}
	for _, p := range t.attachOps(ex, path, syms) {
		if p.Error != "" {
			return true, fmt.Errorf("attaching op probes to %s: %s", path, p.Error)
		}
	}
	return true, nil
}

// OpProbeFiles lists the files whose op probes were attached and those
// whose ops still wait for a first graph (CPU backends that never ran).
func (t *Tracer) OpProbeFiles() (attached, waiting []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, f := range t.files {
		if _, ok := t.pendingOps[uint32(i)]; ok {
			waiting = append(waiting, f)
		}
	}
	for _, p := range t.probes {
		if p.Error == "" && ggml.IsOpProbe(p.Symbol) {
			if !slices.Contains(attached, p.Target) {
				attached = append(attached, p.Target)
			}
		}
	}
	return attached, waiting
}

// attachOps attaches the op probes of a file: one uprobe_multi link, or
// one uprobe per function on kernels without uprobe_multi.
func (t *Tracer) attachOps(ex *link.Executable, real string, opSyms []string) []Probe {
	var out []Probe
	if t.opts.Probes.Ops && len(opSyms) > 0 {
		cookies, offsets, pads := make([]uint64, len(opSyms)), make([]uint64, len(opSyms)), make([]int, len(opSyms))
		t.mu.Lock()
		for i, sym := range opSyms {
			offsets[i], pads[i] = t.offsets[real][sym], t.pads[real][sym]
			cookie, ok := t.opIndex[sym]
			if !ok {
				cookie = uint64(len(t.opFuncs))
				t.opIndex[sym] = cookie
				t.opFuncs = append(t.opFuncs, sym)
			}
			cookies[i] = cookie
		}
		t.mu.Unlock()
		// The dispatcher alone is one plain uprobe, named as itself.
		var l link.Link
		err := errors.New("one function")
		if (len(opSyms) > 1 || opSyms[0] != ggml.SymDispatch) && t.usesPath(CapOps, 0) {
			l, err = ex.UprobeMulti(opSyms, t.objs.OpBeginMulti, &link.UprobeMultiOptions{Addresses: offsets, Cookies: cookies})
		}
		if err == nil {
			t.keepLink(l, true)
			p := Probe{Kind: "uprobe_multi", Target: real, Symbol: fmt.Sprintf("%s* (%d functions)", ggml.OpPrefix, len(opSyms))}
			t.addProbe(p)
			out = append(out, p)
		} else {
			// Kernels before 6.6 have no uprobe_multi (the op probes'
			// second path): one uprobe each. The dispatcher comes here too.
			for i, sym := range opSyms {
				p, _ := t.attachUprobe(ex, real, "uprobe", sym, offsets[i], pads[i], t.objs.OpBegin, cookies[i])
				out = append(out, p)
			}
		}
	}
	return out
}

// attachUprobe attaches prog to sym of the executable real at offset off
// of the file, pad bytes past where sym begins (ggml.Symbols.Offset and
// Pad), as a uprobe or uretprobe (kind) and records the probe, failed or
// not.
func (t *Tracer) attachUprobe(ex *link.Executable, real, kind, sym string, off uint64, pad int, prog *ebpf.Program, cookie uint64) (Probe, error) {
	var l link.Link
	var err error
	// The offset spares cilium/ebpf a second read of the symbol tables.
	opts := &link.UprobeOptions{Address: off, Cookie: cookie}
	if kind == "uretprobe" {
		l, err = ex.Uretprobe(sym, prog, opts)
	} else {
		l, err = ex.Uprobe(sym, prog, opts)
	}
	p := Probe{Kind: kind, Target: real, Symbol: sym, Pad: pad}
	if err != nil {
		p.Error = err.Error()
		err = fmt.Errorf("attaching %s %s: %w", kind, sym, err)
	} else {
		t.keepLink(l, prog == t.objs.GraphCompute || prog == t.objs.GetRowsBegin || prog == t.objs.OpBegin)
	}
	t.addProbe(p)
	return p, err
}

// ProbedInstructions counts the functions of syms in file (a real path
// AttachUser read) whose uprobe sits on an instruction the kernel
// emulates, and those whose sits on one it steps out of line; ok is false
// for a file never read.
func (t *Tracer) ProbedInstructions(file string, syms []string) (emulated, stepped int, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	em, ok := t.emulated[file]
	for _, sym := range syms {
		if e, has := em[sym]; has && e {
			emulated++
		} else if has {
			stepped++
		}
	}
	return emulated, stepped, ok
}

// OpNames returns the target's op names (index = enum ggml_op value) and
// the file they were read from; nil when no libggml-base was probed yet.
func (t *Tracer) OpNames() ([]string, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.opNames...), t.opSource
}
