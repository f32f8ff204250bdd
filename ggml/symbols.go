package ggml

import (
	"debug/elf"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/iocorr/iocorr/internal/elfinfo"
)

// eachDefinedSymbol calls fn once per name for every symbol an ELF file
// defines whose name want takes, from .symtab (local functions of a build
// that kept it) and .dynsym (exported ones), with where a uprobe on it
// goes. want comes first so that only the names wanted are remembered: a
// set of every name (20 000 in libllama's two tables) was 15 ms of each
// recording's start.
func eachDefinedSymbol(path string, want func(name string) bool, fn func(s elf.Symbol, at probeAt)) error {
	seen := map[string]bool{}
	_, err := elfinfo.EachSymbol(path, func(name string) bool { return want(name) && !seen[name] }, func(f *elf.File, s elf.Symbol) {
		if s.Section == elf.SHN_UNDEF {
			return
		}
		seen[s.Name] = true
		var at probeAt
		var code []byte
		code, at.off, at.inFile = elfinfo.CodeAt(f, s.Value, elfinfo.StartBytes)
		if at.inFile && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			at.pad, at.emulated = elfinfo.ProbePoint(f.Machine, code)
		}
		fn(s, at)
	})
	return err
}

// probeAt is where a symbol's uprobe goes: pad bytes (a landing pad,
// elfinfo.ProbePoint) past off, the symbol's offset in the file, when
// inFile (its address lies in an executable segment's bytes in the file);
// emulated, whether the kernel emulates the instruction there.
type probeAt struct {
	off      uint64
	pad      int
	inFile   bool
	emulated bool
}

// ProbePoint is a probe point as a file defines it.
type ProbePoint struct {
	Symbol string
	// Binding is "global", "weak" or "local" (in .symtab only: found by
	// iocorr, invisible to the dynamic linker).
	Binding string
}

// ProbePoints lists the probe points of ProbeSymbols an ELF file defines
// as functions, and how many ggml_compute_forward_* op functions it has
// (global ones, the ones --probe ops attaches to; local ones apart).
func ProbePoints(path string) (points []ProbePoint, globalOps, localOps int, err error) {
	want := func(name string) bool {
		return strings.HasPrefix(name, OpPrefix) || slices.Contains(ProbeSymbols, name)
	}
	err = eachDefinedSymbol(path, want, func(s elf.Symbol, _ probeAt) {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
			return
		}
		bind := "local"
		switch elf.ST_BIND(s.Info) {
		case elf.STB_GLOBAL:
			bind = "global"
		case elf.STB_WEAK:
			bind = "weak"
		}
		for _, p := range ProbeSymbols {
			if s.Name == p {
				points = append(points, ProbePoint{s.Name, bind})
			}
		}
		if strings.HasPrefix(s.Name, OpPrefix) && s.Name != SymGetRows {
			if bind == "local" {
				localOps++
			} else {
				globalOps++
			}
		}
	})
	return points, globalOps, localOps, err
}

// Symbols is what an ELF file offers the probes.
type Symbols struct {
	// Probe are the ProbeSymbols it defines as functions (local ones in
	// .symtab too), sorted.
	Probe []string
	// Ops are the op probe points, sorted: the dispatcher alone
	// (SymDispatch) where the file has it, every exported
	// ggml_compute_forward_* function otherwise.
	Ops []string
	// HasOpNames: it holds ggml's op name table (SymOpNames), which
	// OpNames reads.
	HasOpNames bool
	opNameSym  elf.Symbol
	// Offset is where a uprobe on each function of Probe and Ops is
	// placed in the file: where it begins, or past its landing pad (Pad).
	// Given to the attach, it spares a second read of the symbol tables.
	Offset map[string]uint64
	// Pad is how many bytes of a landing pad (endbr64) open each function
	// that has one: its uprobe sits past them (elfinfo.ProbePoint).
	Pad map[string]int
	// Emulated says, for each function, whether the kernel emulates the
	// instruction its uprobe sits on (elfinfo.ProbePoint): a hit there
	// costs a fraction of one stepped out of line.
	Emulated map[string]bool
}

// FileSymbols reads what an ELF file offers the probes.
func FileSymbols(path string) (Symbols, error) {
	s := Symbols{Offset: map[string]uint64{}, Pad: map[string]int{}, Emulated: map[string]bool{}}
	var dispatch bool
	var dispatchOff uint64
	opOff := map[string]uint64{}
	want := func(name string) bool {
		switch name {
		case SymOpNames, SymDecode, SymGraphCompute, SymDispatch, SymGetRows, SymTensorSet, SymBufferName:
			return true
		}
		return strings.HasPrefix(name, OpPrefix)
	}
	err := eachDefinedSymbol(path, want, func(sym elf.Symbol, at probeAt) {
		off, inFile := at.off+uint64(at.pad), at.inFile
		if at.pad > 0 {
			s.Pad[sym.Name] = at.pad
		}
		if inFile && elf.ST_TYPE(sym.Info) == elf.STT_FUNC {
			s.Emulated[sym.Name] = at.emulated
		}
		switch {
		case sym.Name == SymOpNames:
			s.HasOpNames, s.opNameSym = true, sym
		case elf.ST_TYPE(sym.Info) != elf.STT_FUNC || sym.Value == 0 || !inFile:
		case sym.Name == SymDecode || sym.Name == SymGraphCompute || sym.Name == SymTensorSet || sym.Name == SymBufferName:
			s.Probe = append(s.Probe, sym.Name)
			s.Offset[sym.Name] = off
		case sym.Name == SymDispatch:
			dispatch, dispatchOff = true, off
		default:
			// get_rows is a probe point in any binding: a build that
			// keeps .symtab has it local.
			if sym.Name == SymGetRows {
				s.Probe = append(s.Probe, sym.Name)
				s.Offset[sym.Name] = off
			}
			if strings.HasPrefix(sym.Name, OpPrefix) && elf.ST_BIND(sym.Info) == elf.STB_GLOBAL {
				s.Ops = append(s.Ops, sym.Name)
				opOff[sym.Name] = off
			}
		}
	})
	if dispatch {
		s.Ops, opOff = []string{SymDispatch}, map[string]uint64{SymDispatch: dispatchOff}
	}
	maps.Copy(s.Offset, opOff)
	sort.Strings(s.Probe)
	sort.Strings(s.Ops)
	return s, err
}
