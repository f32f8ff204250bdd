package bpf

import (
	"fmt"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// perfEvent is a software perf event on one CPU with a BPF program as its
// overflow handler. cilium/ebpf has no helper for attaching a
// BPF_PROG_TYPE_PERF_EVENT program to a perf event, so this is the
// ioctl pair the kernel documents (PERF_EVENT_IOC_SET_BPF, _ENABLE).
type perfEvent struct {
	fd int
}

func openSoftwareEvent(config uint64, cpu int, prog *ebpf.Program) (*perfEvent, error) {
	attr := unix.PerfEventAttr{
		Type:   unix.PERF_TYPE_SOFTWARE,
		Config: config,
		Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		// Every fault is a sample, so every fault runs the program.
		Sample: 1,
		Bits:   unix.PerfBitDisabled,
	}
	fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("perf_event_open: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("PERF_EVENT_IOC_SET_BPF: %w", err)
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("PERF_EVENT_IOC_ENABLE: %w", err)
	}
	return &perfEvent{fd: fd}, nil
}

func (p *perfEvent) Close() error {
	if p.fd < 0 {
		return nil
	}
	unix.IoctlSetInt(p.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	err := unix.Close(p.fd)
	p.fd = -1
	return err
}
