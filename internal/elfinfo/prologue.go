package elfinfo

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// UsualPrologue says whether code begins with the instruction C
// compilers usually open a function with: a push of a register on
// x86-64, the store of the frame pointer and link register with
// pre-index (stp x29, x30, [sp, #-n]!) on arm64. It matters to uprobes:
// the kernel emulates such a first instruction in the trap and steps
// others (endbr64 of a CET build, among them) out of line, which cost
// 3–4× more on the lab's VM.
func UsualPrologue(m elf.Machine, code []byte) bool {
	switch m {
	case elf.EM_X86_64:
		if len(code) >= 2 && code[0] == 0x41 { // REX.B: r8–r15
			code = code[1:]
		}
		return len(code) >= 1 && code[0] >= 0x50 && code[0] <= 0x57
	case elf.EM_AARCH64:
		return len(code) >= 4 && binary.LittleEndian.Uint32(code)&0xffc07fff == 0xa9807bfd
	}
	return false
}

// FuncStarts reads the first four bytes of each function of names that
// the ELF file at path defines (in .symtab or .dynsym), from the file,
// where a uprobe on it is placed; it gives the file's machine with them.
// A name the file does not define is absent from the map.
func FuncStarts(path string, names []string) (elf.Machine, map[string][]byte, error) {
	f, err := elf.Open(path)
	if err != nil {
		return elf.EM_NONE, nil, err
	}
	defer f.Close()
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	code := map[string][]byte{}
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, _ := get() // a stripped file has no .symtab
		for _, s := range syms {
			if !want[s.Name] || code[s.Name] != nil || elf.ST_TYPE(s.Info) != elf.STT_FUNC ||
				s.Section == elf.SHN_UNDEF || int(s.Section) >= len(f.Sections) {
				continue
			}
			sec := f.Sections[s.Section]
			if s.Value < sec.Addr || s.Value-sec.Addr > sec.Size-4 || sec.Size < 4 {
				return f.Machine, nil, fmt.Errorf("%s: %s at %#x is outside its section %s", path, s.Name, s.Value, sec.Name)
			}
			b := make([]byte, 4)
			if _, err := sec.ReadAt(b, int64(s.Value-sec.Addr)); err != nil {
				return f.Machine, nil, fmt.Errorf("%s: reading %s: %w", path, s.Name, err)
			}
			code[s.Name] = b
		}
	}
	return f.Machine, code, nil
}
