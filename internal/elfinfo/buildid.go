// Package elfinfo reads facts about ELF files that a trace records or
// needs: the GNU build id that names a build, and the shared libraries
// the dynamic loader would load for a file.
package elfinfo

import (
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
)

// ErrNoBuildID is returned for an ELF file without a GNU build-id note.
var ErrNoBuildID = errors.New("no GNU build id")

// BuildID returns the GNU build id of an ELF file in hex, as `file` and
// `readelf -n` print it. It looks at every note, in sections or (for a
// stripped file without section headers) in PT_NOTE segments.
func BuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	type notes struct {
		b     []byte
		align uint64
	}
	var all []notes
	for _, s := range f.Sections {
		if s.Type == elf.SHT_NOTE {
			b, err := s.Data()
			if err != nil {
				return "", fmt.Errorf("%s: reading %s: %w", path, s.Name, err)
			}
			all = append(all, notes{b, s.Addralign})
		}
	}
	if len(all) == 0 {
		for _, p := range f.Progs {
			if p.Type == elf.PT_NOTE {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err != nil {
					return "", fmt.Errorf("%s: reading a note segment: %w", path, err)
				}
				all = append(all, notes{b, p.Align})
			}
		}
	}
	for _, n := range all {
		id, err := findGNUBuildID(n.b, n.align, f.ByteOrder)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if id != nil {
			return hex.EncodeToString(id), nil
		}
	}
	return "", fmt.Errorf("%s: %w", path, ErrNoBuildID)
}

// ntGNUBuildID is NT_GNU_BUILD_ID of <elf.h>.
const ntGNUBuildID = 3

// findGNUBuildID walks the notes of one note section or segment: each an
// Elf_Nhdr (namesz, descsz, type, 4 bytes each), the name and the
// descriptor, both padded to the alignment of the notes (4 bytes, or 8
// for notes such as .note.gnu.property that ask for it). The bytes come
// from a file and are not trusted: a note that runs past the end is an
// error.
func findGNUBuildID(b []byte, align uint64, bo interface{ Uint32([]byte) uint32 }) ([]byte, error) {
	if align != 8 {
		align = 4
	}
	pad := func(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }
	for len(b) > 0 {
		if len(b) < 12 {
			return nil, errors.New("truncated ELF note header")
		}
		namesz, descsz, typ := uint64(bo.Uint32(b[0:])), uint64(bo.Uint32(b[4:])), bo.Uint32(b[8:])
		nameEnd := 12 + namesz
		descOff := pad(12 + namesz)
		descEnd := descOff + descsz
		if nameEnd > uint64(len(b)) || descEnd > uint64(len(b)) {
			return nil, errors.New("ELF note runs past its section")
		}
		if typ == ntGNUBuildID && string(b[12:nameEnd]) == "GNU\x00" {
			return b[descOff:descEnd], nil
		}
		next := pad(descEnd)
		if next >= uint64(len(b)) {
			break
		}
		b = b[next:]
	}
	return nil, nil
}
