// Package proc reads facts about this machine and its processes for the
// run's metadata: the host, the monotonic clock of BPF timestamps, users
// and their groups, and snapshots of a process's memory mappings.
package proc

import (
	"bufio"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
)

// HostInfo describes the machine for the run metadata.
func HostInfo() kernel.Host {
	h := kernel.Host{NumCPU: runtime.NumCPU(), PageSize: os.Getpagesize()}
	h.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		h.Kernel = unix.ByteSliceToString(u.Release[:]) + " " + unix.ByteSliceToString(u.Version[:])
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				h.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		h.MemTotal = uint64(si.Totalram) * uint64(si.Unit)
	}
	return h
}

// MonotonicNS is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func MonotonicNS() uint64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}
