package bpf

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/elfinfo"
)

var calibrationSink uint64

// UprobeCost is what one uprobe hit costs on this machine.
type UprobeCost struct {
	PerHit   time.Duration // median over rounds of (probed − bare) ÷ calls
	Min, Max time.Duration // the cheapest and dearest round
	Bare     time.Duration // one call without the probe (median)
	First    FirstInstruction
	Pad      int // bytes of a landing pad the probe skipped
	Calls    int // per arm and round
	Rounds   int
	PerRound []time.Duration // each round's (probed − bare) ÷ calls, in order
}

// BareMetalUprobeCost is what one uprobe hit costs on bare metal
// (LAB-NOTES: 0.3–0.7 µs), for estimating a recording's cost there.
var BareMetalUprobeCost = [2]time.Duration{300 * time.Nanosecond, 700 * time.Nanosecond}

// FirstInstruction is what the kernel does with the first instruction
// of a probed function on a hit, which sets most of the hit's cost.
type FirstInstruction int

const (
	// Emulated: the compilers' usual prologue (elfinfo.UsualPrologue),
	// which the kernel emulates in the trap; in a CET build it follows
	// an endbr64 the probe skips (elfinfo.ProbePoint).
	Emulated FirstInstruction = iota
	// Stepped: any other probed instruction, which the kernel copies out
	// of line and single-steps.
	Stepped
)

func (f FirstInstruction) String() string {
	if f == Stepped {
		return "stepped"
	}
	return "emulated"
}

// MeasureUprobeCost measures what one uprobe hit costs here on a function
// whose first instruction the kernel handles as first says: calls to a
// function of this binary, timed side by side without and with the
// cheapest uprobe program attached (the trap, the kernel's uprobe
// handling and the return; the programs' own work per hit is what
// bpf_stats reports beside it), round after round on one thread. It
// loads only that program and its counter, so it can run beside a
// recording, and refuses a result whose probe did not fire every call.
func MeasureUprobeCost(calls, rounds int, first FirstInstruction) (UprobeCost, error) {
	if calls < 1 || rounds < 1 {
		return UprobeCost{}, fmt.Errorf("calibration needs at least one call and one round, got %d and %d", calls, rounds)
	}
	spec, err := LoadIocorr()
	if err != nil {
		return UprobeCost{}, fmt.Errorf("loading BPF spec: %w", err)
	}
	var objs struct {
		Prog *ebpf.Program `ebpf:"calibrate"`
		Hits *ebpf.Map     `ebpf:"calib_hits"`
	}
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			return UprobeCost{}, fmt.Errorf("%w: %v", ErrPrivileges, err)
		}
		return UprobeCost{}, fmt.Errorf("loading the calibration program: %w", err)
	}
	defer objs.Prog.Close()
	defer objs.Hits.Close()
	// By file offset: go run and go test binaries have no symbol table,
	// and a position-independent one loads anywhere.
	pcTarget, pcStepped := calibrationPCs()
	target, pc := calibrationTarget, pcTarget
	if first == Stepped {
		target, pc = calibrationStepped, pcStepped
	}
	self, off, err := mappedFileOffset(pc)
	if err != nil {
		return UprobeCost{}, err
	}
	pad, err := probePad(self, off)
	if err != nil {
		return UprobeCost{}, err
	}
	off += uint64(pad)
	ex, err := link.OpenExecutable(self)
	if err != nil {
		return UprobeCost{}, fmt.Errorf("opening %s for uprobes: %w", self, err)
	}
	// One thread for both arms: a migration mid-round would add to one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	loop := func() time.Duration {
		start := time.Now()
		for range calls {
			calibrationSink = target(calibrationSink)
		}
		return time.Since(start)
	}
	loop() // warm the code and its page
	per := make([]time.Duration, 0, rounds)
	bare := make([]time.Duration, 0, rounds)
	for range rounds {
		b := loop()
		l, err := ex.Uprobe("calibration_target", objs.Prog, &link.UprobeOptions{Address: off})
		if err != nil {
			return UprobeCost{}, fmt.Errorf("attaching the calibration uprobe in %s: %w", self, err)
		}
		p := loop()
		if err := l.Close(); err != nil {
			return UprobeCost{}, fmt.Errorf("detaching the calibration uprobe: %w", err)
		}
		per = append(per, max(p-b, 0)/time.Duration(calls))
		bare = append(bare, b/time.Duration(calls))
	}
	var counts []uint64
	if err := objs.Hits.Lookup(uint32(0), &counts); err != nil {
		return UprobeCost{}, fmt.Errorf("reading the calibration hits: %w", err)
	}
	var hits uint64
	for _, n := range counts {
		hits += n
	}
	if want := uint64(calls) * uint64(rounds); hits != want {
		return UprobeCost{}, fmt.Errorf("the calibration uprobe fired %d times for %d calls: the probed arm did not run probed", hits, want)
	}
	inOrder := slices.Clone(per)
	slices.Sort(per)
	slices.Sort(bare)
	return UprobeCost{PerHit: per[len(per)/2], Min: per[0], Max: per[len(per)-1], Bare: bare[len(bare)/2], First: first, Pad: pad, Calls: calls, Rounds: rounds,
		PerRound: inOrder}, nil
}

// probePad is how many bytes of a landing pad open the code at offset
// off of file: where the probe goes, as the recorder places it on
// llama.cpp's functions (elfinfo.ProbePoint).
func probePad(file string, off uint64) (int, error) {
	machine := hostMachine()
	if machine == elf.EM_NONE {
		return 0, nil
	}
	f, err := os.Open(file)
	if err != nil {
		return 0, fmt.Errorf("reading the calibration target: %w", err)
	}
	defer f.Close()
	code := make([]byte, elfinfo.StartBytes)
	if _, err := f.ReadAt(code, int64(off)); err != nil {
		return 0, fmt.Errorf("reading the calibration target in %s: %w", file, err)
	}
	pad, _ := elfinfo.ProbePoint(machine, code)
	return pad, nil
}

// hostMachine is the ELF machine of this binary's architecture, EM_NONE
// where the calibration targets are not assembly (calibrate_other.go).
func hostMachine() elf.Machine {
	return map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[runtime.GOARCH]
}

// mappedFileOffset finds the file and file offset an address of this
// process's code is mapped from (/proc/self/maps).
func mappedFileOffset(addr uintptr) (string, uint64, error) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return "", 0, fmt.Errorf("reading /proc/self/maps: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line) // start-end perms offset dev inode path
		if len(f) < 6 {
			continue
		}
		var start, end, pgoff uint64
		if _, err := fmt.Sscanf(f[0]+" "+f[2], "%x-%x %x", &start, &end, &pgoff); err != nil {
			continue
		}
		if uint64(addr) >= start && uint64(addr) < end {
			return f[5], uint64(addr) - start + pgoff, nil
		}
	}
	return "", 0, fmt.Errorf("address %#x is in no file mapping of this process", addr)
}
