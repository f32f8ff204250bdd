package elfinfo

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
)

// UsualPrologue says whether code begins with the instruction C
// compilers usually open a function with: a push of a register on
// x86-64, the store of the frame pointer and link register with
// pre-index (stp x29, x30, [sp, #-n]!) on arm64. It matters to uprobes:
// the kernel emulates such an instruction in the trap and steps others
// (endbr64 of a CET build, among them) out of line, which cost 3–10× more
// on the lab's VM.
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

// endbr64 is the indirect-branch landing pad of x86-64 CET (IBT).
var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// ProbePoint is where a uprobe on a function whose code begins with code
// is placed: pad bytes in, past an indirect-branch landing pad, and
// whether the kernel emulates the instruction there (UsualPrologue).
//
// A CET build (node-llama-cpp's, most distributions' gcc) opens every
// function with endbr64, which the kernel copies out of line and
// single-steps: on the lab's VM a hit there cost 6 µs, on the push after
// it 0.6 µs. endbr64 changes no register, memory or flag, and every
// entry, direct or indirect, passes the instruction after it, so a probe
// there sees the same arguments, stack and return address, once per call.
// arm64's bti c would be as inert, but no arm64 kernel here tells what a
// hit after it costs; paciasp signs the link register, and a return probe
// past it would hand the function an unsigned return address.
func ProbePoint(m elf.Machine, code []byte) (pad int, emulated bool) {
	if m == elf.EM_X86_64 && bytes.HasPrefix(code, endbr64) {
		pad = len(endbr64)
	}
	return pad, UsualPrologue(m, code[pad:])
}

// CodeAt reads up to n bytes of the code at address vaddr from the
// executable segment of f that holds it, with vaddr's offset in the file
// (where a uprobe on it is placed); ok is false when no executable
// segment holds vaddr within its bytes in the file. Fewer than n bytes
// come back where the segment ends first.
func CodeAt(f *elf.File, vaddr uint64, n int) (code []byte, off uint64, ok bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 || vaddr < p.Vaddr || vaddr-p.Vaddr >= p.Filesz {
			continue
		}
		rel := vaddr - p.Vaddr
		code = make([]byte, min(uint64(n), p.Filesz-rel))
		k, _ := p.ReadAt(code, int64(rel))
		return code[:k], p.Off + rel, true
	}
	return nil, 0, false
}

// FuncStarts reads the first bytes of each function of names that the
// ELF file at path defines (in .symtab or .dynsym), from the file: enough
// for ProbePoint to tell where a uprobe on it goes and what it costs. It
// gives the file's machine with them. A name the file does not define in
// an executable segment is absent from the map.
func FuncStarts(path string, names []string) (elf.Machine, map[string][]byte, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	code := map[string][]byte{}
	var bad error
	machine, err := EachSymbol(path, func(name string) bool { return want[name] && code[name] == nil }, func(f *elf.File, s elf.Symbol) {
		if bad != nil || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF {
			return
		}
		b, _, ok := CodeAt(f, s.Value, StartBytes)
		if !ok || len(b) == 0 {
			bad = fmt.Errorf("%s: %s at %#x is in no executable segment's bytes", path, s.Name, s.Value)
			return
		}
		code[s.Name] = b
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return machine, nil, err
	}
	return machine, code, nil
}

// StartBytes is how much of a function's code ProbePoint needs: a landing
// pad and the longest instruction UsualPrologue knows.
const StartBytes = 8
