package testenv

import (
	"os"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Capabilities (linux/capability.h) that loading and attaching iocorr's
// programs needs, short of CAP_SYS_ADMIN which implies both.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// RequireBPF stops t unless the process may load BPF programs and attach
// them to tracepoints and perf events: CAP_SYS_ADMIN, or CAP_BPF with
// CAP_PERFMON, in its effective set.
func RequireBPF(t testing.TB) {
	t.Helper()
	caps, err := effectiveCaps()
	if err != nil {
		t.Fatalf("reading this process's capabilities: %v", err)
	}
	if !has(caps, capSysAdmin) && !(has(caps, capBPF) && has(caps, capPerfmon)) {
		missing(t, "loading BPF programs needs CAP_BPF and CAP_PERFMON (or root)")
		return
	}
	// An emulator (qemu-user running the arm64 tests) has no bpf(2): a
	// command no kernel knows gets EINVAL from a kernel, ENOSYS from it.
	if _, _, errno := unix.Syscall(unix.SYS_BPF, ^uintptr(0)>>1, 0, 0); errno == unix.ENOSYS {
		missing(t, "this system has no bpf(2) (an emulator's?)")
	}
}

func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, err
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

func has(caps uint64, c uint) bool { return caps&(1<<c) != 0 }

// OpenPTY opens a pseudo-terminal pair, closed when t ends. Neither end
// becomes the test's controlling terminal.
func OpenPTY(t testing.TB) (master, slave *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening a pseudo-terminal: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlocking the pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("numbering the pseudo-terminal: %v", err)
	}
	s, err := os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("opening the pseudo-terminal's slave: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return m, s
}
