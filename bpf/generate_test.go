package bpf

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/iocorr/iocorr/wire"
)

// The committed objects must be what `make generate` makes of the committed
// sources. The check runs in a copy of the sources at another path, so
// it also shows that the bytes do not depend on where the checkout lives.
func TestGenerateReproducesCommittedObjects(t *testing.T) {
	check := exec.Command("bash", "../scripts/bpf-toolchain.sh")
	check.Env = append(os.Environ(), "FORCE=")
	var stderr bytes.Buffer
	check.Stderr = &stderr
	if err := check.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == 2 {
			t.Skipf("not the pinned toolchain, regenerated objects could not match: %s", strings.TrimSpace(stderr.String()))
		}
		t.Fatalf("checking the toolchain: %v: %s", err, stderr.String())
	}

	args := bpf2goArgs(t)
	dir := t.TempDir()
	bpf2go := filepath.Join(dir, "bpf2go")
	// Built from go.mod's version, the one `go tool bpf2go` runs.
	if out, err := exec.Command("go", "build", "-o", bpf2go, "github.com/cilium/ebpf/cmd/bpf2go").CombinedOutput(); err != nil {
		t.Fatalf("building bpf2go: %v: %s", err, out)
	}
	src := filepath.Join(dir, "elsewhere", "bpf")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	// Every C source and header: iocorr.bpf.c includes the *.bpf.h of
	// its probe sets.
	sources, err := filepath.Glob("*.[ch]")
	if err != nil || len(sources) < 3 {
		t.Fatalf("BPF sources %v: %v", sources, err)
	}
	for _, name := range sources {
		copyFile(t, name, filepath.Join(src, name))
	}

	gen := exec.Command(bpf2go, args...)
	gen.Dir = src
	gen.Env = append(withoutBPF2GOEnv(os.Environ()), "GOPACKAGE=bpf", "GOFILE=gen.go")
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("bpf2go %s: %v: %s", strings.Join(args, " "), err, out)
	}

	for _, name := range []string{"iocorr_x86_bpfel.o", "iocorr_x86_bpfel.go", "iocorr_arm64_bpfel.o", "iocorr_arm64_bpfel.go"} {
		committed, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		regenerated, err := os.ReadFile(filepath.Join(src, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(committed, regenerated) {
			t.Errorf("bpf/%s differs from what the sources generate (%d bytes committed, %d regenerated): run make generate and commit it",
				name, len(committed), len(regenerated))
		}
	}
}

// bpf2goArgs reads the bpf2go arguments from gen.go's directive, so the test
// runs exactly what `make generate` runs.
func bpf2goArgs(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("gen.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const prefix = "//go:generate go tool bpf2go "
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			args, err := splitDirective(rest)
			if err != nil {
				t.Fatalf("gen.go: %v", err)
			}
			return args
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("gen.go has no %q directive", prefix)
	return nil
}

// splitDirective splits a go:generate line as go generate does: on spaces,
// with double-quoted strings kept whole.
func splitDirective(s string) ([]string, error) {
	var args []string
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		if s[0] == '"' {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", s)
			}
			args = append(args, s[1:1+end])
			s = s[2+end:]
			continue
		}
		word, rest, _ := strings.Cut(s, " ")
		args = append(args, word)
		s = rest
	}
	return args, nil
}

func TestSplitDirectiveKeepsQuotedStringsWhole(t *testing.T) {
	got, err := splitDirective(`-cc clang-14 -cflags "-O2 -g"  Iocorr x.c -- -I.`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"-cc", "clang-14", "-cflags", "-O2 -g", "Iocorr", "x.c", "--", "-I."}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("split = %q, want %q", got, want)
	}
	if _, err := splitDirective(`-cflags "-O2`); err == nil {
		t.Error("an unterminated quote was accepted")
	}
}

// withoutBPF2GOEnv drops BPF2GO_* settings, which would override the
// directive's flags.
func withoutBPF2GOEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "BPF2GO_") {
			kept = append(kept, kv)
		}
	}
	return kept
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The arm64 object, which no machine here can load, holds the programs,
// maps and variables of the x86-64 one, each of the same kind, and the
// perf event programs read the context at arm64's offsets (addr past
// user_pt_regs' 34 registers, not x86-64's 21).
func TestTheArm64ObjectMatchesTheX86Object(t *testing.T) {
	load := func(name string) *ebpf.CollectionSpec {
		spec, err := ebpf.LoadCollectionSpec(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return spec
	}
	x86, arm := load("iocorr_x86_bpfel.o"), load("iocorr_arm64_bpfel.o")
	for name, p := range x86.Programs {
		q := arm.Programs[name]
		if q == nil {
			t.Errorf("program %s is not in the arm64 object", name)
			continue
		}
		if p.Type != q.Type || p.AttachType != q.AttachType || p.SectionName != q.SectionName {
			t.Errorf("program %s: x86 %s %s %s, arm64 %s %s %s", name, p.Type, p.AttachType, p.SectionName, q.Type, q.AttachType, q.SectionName)
		}
	}
	if len(arm.Programs) != len(x86.Programs) || len(arm.Maps) != len(x86.Maps) || len(arm.Variables) != len(x86.Variables) {
		t.Errorf("arm64 has %d programs, %d maps, %d variables; x86 %d, %d, %d",
			len(arm.Programs), len(arm.Maps), len(arm.Variables), len(x86.Programs), len(x86.Maps), len(x86.Variables))
	}
	// The offsets of bpf_perf_event_data each object loads: loads through
	// the context, R1 at entry or a register it was copied to (the
	// program's other loads are of map values and the stack).
	addrOffsets := func(spec *ebpf.CollectionSpec) map[int16]bool {
		out := map[int16]bool{}
		ctx := map[asm.Register]bool{asm.R1: true}
		for _, ins := range spec.Programs["fault_major"].Instructions {
			switch {
			case ins.OpCode.Class() == asm.LdXClass && ins.OpCode.Size() == asm.DWord && ctx[ins.Src]:
				out[ins.Offset] = true
			case ins.OpCode.Class().IsALU() && ins.OpCode.ALUOp() == asm.Mov && ins.OpCode.Source() == asm.RegSource && ctx[ins.Src]:
				ctx[ins.Dst] = true
				continue
			case ins.OpCode.JumpOp() == asm.Call:
				// A call clobbers R1-R5.
				for r := asm.R1; r <= asm.R5; r++ {
					delete(ctx, r)
				}
				continue
			}
			if ins.OpCode.Class().IsALU() || ins.OpCode.Class() == asm.LdXClass || ins.OpCode.IsDWordLoad() {
				delete(ctx, ins.Dst)
			}
		}
		return out
	}
	for _, tc := range []struct {
		spec *ebpf.CollectionSpec
		arch string
		addr int16
	}{{x86, "x86-64", 21*8 + 8}, {arm, "arm64", 34*8 + 8}} {
		other := int16(21*8+8) + int16(34*8+8) - tc.addr
		if got := addrOffsets(tc.spec); !got[tc.addr] || got[other] {
			t.Errorf("%s fault_major loads at offsets %v, want addr at %d and nothing at %d", tc.arch, got, tc.addr, other)
		}
	}
}

// startHdr reads blk_start's hdr as the wire's struct event_hdr: both are
// written from the same BTF, field for field at the same offsets.
func TestTheLoaderTypesHoldTheWireHeader(t *testing.T) {
	loader := reflect.TypeOf(IocorrBlkStart{}.Hdr)
	wireHdr := reflect.TypeOf(wire.EventHdr{})
	if loader.Size() != wireHdr.Size() || loader.NumField() != wireHdr.NumField() {
		t.Fatalf("blk_start's hdr is %d bytes in %d fields, wire.EventHdr %d in %d", loader.Size(), loader.NumField(), wireHdr.Size(), wireHdr.NumField())
	}
	for i := range loader.NumField() {
		a, b := loader.Field(i), wireHdr.Field(i)
		if a.Name != b.Name || a.Offset != b.Offset || a.Type.String() != b.Type.String() {
			t.Errorf("field %d: %s %s at %d, wire has %s %s at %d", i, a.Name, a.Type, a.Offset, b.Name, b.Type, b.Offset)
		}
	}
}
