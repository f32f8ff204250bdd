package ggml

import (
	"debug/elf"
	"sort"
	"strings"
)

// eachDefinedSymbol calls fn once per name for every symbol an ELF file
// defines, from .symtab (local functions of a build that kept it) and
// .dynsym (exported ones).
func eachDefinedSymbol(path string, fn func(elf.Symbol)) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	seen := map[string]bool{}
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := get()
		if err != nil {
			continue // a stripped file has no .symtab; .dynsym may remain
		}
		for _, s := range syms {
			if seen[s.Name] || s.Section == elf.SHN_UNDEF {
				continue
			}
			seen[s.Name] = true
			fn(s)
		}
	}
	return nil
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
	err = eachDefinedSymbol(path, func(s elf.Symbol) {
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

// FileSymbols lists which probe symbols an ELF file defines (local ones
// in .symtab too), plus the op probe points: the dispatcher alone
// (SymDispatch) where the file has it, every exported
// ggml_compute_forward_* function otherwise.
func FileSymbols(path string) (probe []string, ops []string, hasOpNames bool, err error) {
	dispatch := false
	err = eachDefinedSymbol(path, func(s elf.Symbol) {
		switch {
		case s.Name == SymOpNames:
			hasOpNames = true
		case elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0:
		case s.Name == SymDecode || s.Name == SymGraphCompute:
			probe = append(probe, s.Name)
		case s.Name == SymDispatch:
			dispatch = true
		default:
			// get_rows is a probe point in any binding: a build that
			// keeps .symtab has it local.
			if s.Name == SymGetRows {
				probe = append(probe, s.Name)
			}
			if strings.HasPrefix(s.Name, OpPrefix) && elf.ST_BIND(s.Info) == elf.STB_GLOBAL {
				ops = append(ops, s.Name)
			}
		}
	})
	if dispatch {
		ops = []string{SymDispatch}
	}
	sort.Strings(probe)
	sort.Strings(ops)
	return probe, ops, hasOpNames, err
}
