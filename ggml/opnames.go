package ggml

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

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
	for _, s := range syms {
		if s.Name == SymOpNames && s.Size > 0 {
			return opNamesAt(f, path, s)
		}
	}
	return nil, fmt.Errorf("%s: no GGML_OP_NAME symbol", path)
}

// OpNames reads the op name table FileSymbols found in the file at path
// (HasOpNames), as OpNamesFromELF does, without reading the file's symbol
// tables again.
func (s Symbols) OpNames(path string) ([]string, error) {
	if !s.HasOpNames || s.opNameSym.Size == 0 {
		return nil, fmt.Errorf("%s: no GGML_OP_NAME symbol", path)
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return opNamesAt(f, path, s.opNameSym)
}

// opNamesAt reads the table at sym of the open ELF file f (named path).
func opNamesAt(f *elf.File, path string, sym elf.Symbol) ([]string, error) {
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
