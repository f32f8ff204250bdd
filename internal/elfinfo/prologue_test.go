package elfinfo

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Where a probe goes and whether the kernel emulates the instruction
// there: past a landing pad, on the compilers' usual first instruction.
func TestProbePointSkipsOnlyALandingPadOntoTheCompilersPrologue(t *testing.T) {
	for _, tc := range []struct {
		name     string
		machine  elf.Machine
		code     []byte
		pad      int
		emulated bool
	}{
		{"endbr64 then push rbp", elf.EM_X86_64, []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5}, 4, true},
		{"endbr64 then push r15", elf.EM_X86_64, []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x41, 0x57}, 4, true},
		{"endbr64 then mov", elf.EM_X86_64, []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x89, 0xc0}, 4, false},
		{"endbr64 alone", elf.EM_X86_64, []byte{0xf3, 0x0f, 0x1e, 0xfa}, 4, false},
		{"push rbp", elf.EM_X86_64, []byte{0x55, 0x48, 0x89, 0xe5}, 0, true},
		{"endbr32 is no 64-bit pad", elf.EM_X86_64, []byte{0xf3, 0x0f, 0x1e, 0xfb, 0x55}, 0, false},
		{"endbr64 cut short", elf.EM_X86_64, []byte{0xf3, 0x0f, 0x1e}, 0, false},
		{"endbr64's bytes on arm64", elf.EM_AARCH64, []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xfd, 0x7b, 0xbf, 0xa9}, 0, false},
		{"bti c stays probed on arm64", elf.EM_AARCH64, []byte{0x5f, 0x24, 0x03, 0xd5, 0xfd, 0x7b, 0xbf, 0xa9}, 0, false},
		{"nothing", elf.EM_X86_64, nil, 0, false},
		{"push r15 alone", elf.EM_X86_64, []byte{0x41, 0x57}, 0, true},
		{"mov rax, rax", elf.EM_X86_64, []byte{0x48, 0x89, 0xc0}, 0, false},
		{"rex.b alone", elf.EM_X86_64, []byte{0x41}, 0, false},
		{"stp x29, x30, [sp, #-16]!", elf.EM_AARCH64, []byte{0xfd, 0x7b, 0xbf, 0xa9}, 0, true},
		{"stp x29, x30, [sp, #-96]!", elf.EM_AARCH64, []byte{0xfd, 0x7b, 0xba, 0xa9}, 0, true},
		{"stp x29, x30, [sp, #16] (no writeback)", elf.EM_AARCH64, []byte{0xfd, 0x7b, 0x01, 0xa9}, 0, false},
		{"sub sp, sp, #32", elf.EM_AARCH64, []byte{0xff, 0x83, 0x00, 0xd1}, 0, false},
		{"stp cut short", elf.EM_AARCH64, []byte{0xfd, 0x7b}, 0, false},
		{"other machine", elf.EM_RISCV, []byte{0x55}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pad, emulated := ProbePoint(tc.machine, tc.code)
			if pad != tc.pad || emulated != tc.emulated {
				t.Errorf("ProbePoint(% x) = %d, %v; want %d, %v", tc.code, pad, emulated, tc.pad, tc.emulated)
			}
		})
	}
}

// FuncStarts reads what a uprobe on each function is placed on: a C
// file compiled here, whose two functions begin with instructions of
// its own choosing.
func TestFuncStartsReadsEachFunctionsFirstInstruction(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the functions are written in x86-64 assembly")
	}
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatal("no gcc (scripts/setup.sh installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "f.c")
	os.WriteFile(src, []byte(`
__attribute__((noinline)) long pushes(long x) { __asm__ volatile("push %%rbx\n pop %%rbx" ::: "memory"); return x + 1; }
__attribute__((noinline)) long moves(long x) { __asm__ volatile("mov %%rax, %%rax" ::: "memory"); return x + 2; }
int main(int argc, char **argv) { return (int)(pushes(argc) + moves(argc)); }
`), 0o644)
	bin := filepath.Join(dir, "f")
	if out, err := exec.Command(gcc, "-O2", "-fcf-protection=none", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	m, code, err := FuncStarts(bin, []string{"pushes", "moves", "absent"})
	if err != nil {
		t.Fatal(err)
	}
	if m != elf.EM_X86_64 {
		t.Errorf("machine %v", m)
	}
	for name, want := range map[string][]byte{"pushes": {0x53, 0x5b}, "moves": {0x48, 0x89, 0xc0}} {
		if got := code[name]; !bytes.HasPrefix(got, want) {
			t.Errorf("%s begins % x, want % x", name, got, want)
		}
	}
	if !UsualPrologue(m, code["pushes"]) || UsualPrologue(m, code["moves"]) {
		t.Errorf("usual prologue: pushes %v, moves %v; want true, false", UsualPrologue(m, code["pushes"]), UsualPrologue(m, code["moves"]))
	}
	if _, ok := code["absent"]; ok {
		t.Error("a function the file does not define has code")
	}

	// The same functions in a CET build open with endbr64: the probe
	// goes past it, onto the same instructions.
	cet := filepath.Join(dir, "f-cet")
	if out, err := exec.Command(gcc, "-O2", "-fcf-protection=full", "-o", cet, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	m, code, err = FuncStarts(cet, []string{"pushes", "moves"})
	if err != nil {
		t.Fatal(err)
	}
	for name, emulated := range map[string]bool{"pushes": true, "moves": false} {
		pad, emu := ProbePoint(m, code[name])
		if !bytes.HasPrefix(code[name], endbr64) || pad != 4 || emu != emulated {
			t.Errorf("%s of the CET build begins % x: probed %d bytes in, emulated %v; want past endbr64, %v", name, code[name], pad, emu, emulated)
		}
	}
}
