package elfinfo

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"unsafe"
)

// EachSymbol calls fn for every symbol of the ELF file at path, from its
// .symtab and then its .dynsym, whose name keep takes, with the file (its
// headers) it was read from. It reads the tables where they lie in the
// file, mapped, without building them: debug/elf's Symbols makes a Go
// value and a string of every entry, and the recorder looks for llama.cpp
// in every executable file a traced process maps: node's two tables
// (190 000 entries) took 35 MiB and 80 ms of a recording's start so. The
// name keep gets is valid during the call only; fn gets its own copy.
// Every offset and count of the tables is checked against the file's
// size. Files other than 64-bit ones go through debug/elf. It gives the
// file's machine.
func EachSymbol(path string, keep func(name string) bool, fn func(f *elf.File, s elf.Symbol)) (elf.Machine, error) {
	file, err := os.Open(path)
	if err != nil {
		return elf.EM_NONE, err
	}
	defer file.Close()
	f, err := elf.NewFile(file)
	if err != nil {
		return elf.EM_NONE, err
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 {
		for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
			syms, _ := get() // a stripped file has no .symtab
			for _, s := range syms {
				if keep(s.Name) {
					fn(f, s)
				}
			}
		}
		return f.Machine, nil
	}
	st, err := file.Stat()
	if err != nil {
		return elf.EM_NONE, err
	}
	data, unmap, err := mapFile(file, st.Size())
	if err != nil {
		return f.Machine, fmt.Errorf("mapping %s: %w", path, err)
	}
	defer unmap()
	for _, typ := range []elf.SectionType{elf.SHT_SYMTAB, elf.SHT_DYNSYM} {
		sec := f.SectionByType(typ)
		if sec == nil {
			continue
		}
		tab, err := sectionBytes(data, f, sec)
		if err != nil {
			return f.Machine, fmt.Errorf("%s: %w", path, err)
		}
		if int(sec.Link) >= len(f.Sections) {
			return f.Machine, fmt.Errorf("%s: %s links to section %d of %d", path, sec.Name, sec.Link, len(f.Sections))
		}
		strtab, err := sectionBytes(data, f, f.Sections[sec.Link])
		if err != nil {
			return f.Machine, fmt.Errorf("%s: %w", path, err)
		}
		// Entry 0 is the undefined symbol, as debug/elf leaves it out.
		for e := elf.Sym64Size; e+elf.Sym64Size <= len(tab); e += elf.Sym64Size {
			b := tab[e : e+elf.Sym64Size]
			off := f.ByteOrder.Uint32(b[0:4])
			if int64(off) >= int64(len(strtab)) {
				continue // a name outside its table: no name to match
			}
			raw := strtab[off:]
			if end := bytes.IndexByte(raw, 0); end >= 0 {
				raw = raw[:end]
			}
			if len(raw) == 0 {
				continue
			}
			name := unsafe.String(&raw[0], len(raw))
			if !keep(name) {
				continue
			}
			fn(f, elf.Symbol{
				Name:    strings.Clone(name),
				Info:    b[4],
				Other:   b[5],
				Section: elf.SectionIndex(f.ByteOrder.Uint16(b[6:8])),
				Value:   f.ByteOrder.Uint64(b[8:16]),
				Size:    f.ByteOrder.Uint64(b[16:24]),
			})
		}
	}
	return f.Machine, nil
}

// sectionBytes is a section's bytes in data, the whole file mapped; a
// section that claims bytes past the file's end is an error.
func sectionBytes(data []byte, f *elf.File, sec *elf.Section) ([]byte, error) {
	if sec.Type == elf.SHT_NOBITS {
		return nil, fmt.Errorf("section %s has no bytes in the file", sec.Name)
	}
	if sec.Offset > uint64(len(data)) || sec.Size > uint64(len(data))-sec.Offset {
		return nil, fmt.Errorf("section %s (%d bytes at %d) runs past the file's %d bytes", sec.Name, sec.Size, sec.Offset, len(data))
	}
	return data[sec.Offset : sec.Offset+sec.Size], nil
}
