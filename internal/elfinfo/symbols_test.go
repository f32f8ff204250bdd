package elfinfo

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// debug/elf is the oracle: the symbols EachSymbol walks are the ones its
// Symbols and DynamicSymbols build, entry for entry.
func TestEachSymbolWalksWhatDebugELFReads(t *testing.T) {
	files := []string{"/bin/ls", withSymtab(t)}
	if node, err := exec.LookPath("node"); err == nil {
		files = append(files, node) // two tables of ~190 000 entries
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			f, err := elf.Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			var want []elf.Symbol
			for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
				syms, _ := get()
				for _, s := range syms {
					if s.Name != "" {
						want = append(want, s)
					}
				}
			}
			if len(want) == 0 {
				t.Fatalf("%s has no symbols: the comparison tests nothing", path)
			}
			var got []elf.Symbol
			_, err = EachSymbol(path, func(string) bool { return true }, func(_ *elf.File, s elf.Symbol) { got = append(got, s) })
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%d symbols, debug/elf reads %d", len(got), len(want))
			}
			for i := range got {
				g, w := got[i], want[i]
				if g.Name != w.Name || g.Info != w.Info || g.Other != w.Other || g.Section != w.Section || g.Value != w.Value || g.Size != w.Size {
					t.Fatalf("symbol %d: %+v, debug/elf reads %+v", i, g, w)
				}
			}
			var picked int
			EachSymbol(path, func(n string) bool { return n == want[len(want)/2].Name }, func(*elf.File, elf.Symbol) { picked++ })
			if picked == 0 {
				t.Errorf("keep took %q and fn never saw it", want[len(want)/2].Name)
			}
		})
	}
}

// A symbol table or its names claiming bytes past the file's end is an
// error, never a read past the mapping.
func TestEachSymbolRefusesTablesPastTheFilesEnd(t *testing.T) {
	bin := withSymtab(t)
	whole, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	symtab := slices.IndexFunc(f.Sections, func(s *elf.Section) bool { return s.Type == elf.SHT_SYMTAB })
	strtab := -1
	if symtab >= 0 {
		strtab = int(f.Sections[symtab].Link)
	}
	f.Close()
	if symtab < 0 {
		t.Fatal("the C program has no .symtab")
	}
	shoff := binary.LittleEndian.Uint64(whole[0x28:0x30])
	for _, tc := range []struct {
		name    string
		section int
		field   int // in the section header: 0x18 offset, 0x20 size
		value   uint64
	}{
		{"a symbol table longer than the file", symtab, 0x20, 1 << 40},
		{"a symbol table past the file's end", symtab, 0x18, uint64(len(whole)) + 24},
		{"names longer than the file", strtab, 0x20, 1 << 40},
		{"a size that wraps the offset around", symtab, 0x20, ^uint64(0) - 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := append([]byte(nil), whole...)
			at := shoff + uint64(tc.section)*64 + uint64(tc.field)
			binary.LittleEndian.PutUint64(bad[at:at+8], tc.value)
			path := filepath.Join(t.TempDir(), "bad")
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := EachSymbol(path, func(string) bool { return true }, func(*elf.File, elf.Symbol) {})
			if err == nil {
				t.Error("read without an error")
			}
		})
	}
}

// withSymtab builds a C program that keeps its .symtab.
func withSymtab(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join(dir, "f.c")
	if err := os.WriteFile(src, []byte("int counter;\nstatic int twice(int x) { return 2 * x; }\nint main(int c, char **v) { return twice(c) + counter; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "f")
	if out, err := exec.Command("gcc", "-O0", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	return bin
}
