package bench

import (
	"errors"
	"fmt"

	"github.com/prometheus/procfs"
)

// hostCPU is the machine's CPU time so far as /proc/stat counts it, in
// seconds summed over CPUs: all of it, and the part a hypervisor ran
// other guests on while this one wanted to run (steal). On a shared VM
// steal comes and goes: a round that lost a third of its CPUs to other
// guests measures the host, not the tracer, and the report says so.
type hostCPU struct{ total, steal float64 }

func readHostCPU() (hostCPU, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return hostCPU{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	st, err := fs.Stat()
	if err != nil {
		return hostCPU{}, fmt.Errorf("reading /proc/stat: %w", err)
	}
	c := st.CPUTotal
	// Guest time is already inside user and nice.
	return hostCPU{total: c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal, steal: c.Steal}, nil
}

var errNoHostTime = errors.New("no CPU time passed between the two reads of /proc/stat")

// stolenShare is the share of the machine's CPU time from a to b that
// went to other guests.
func stolenShare(a, b hostCPU) (float64, error) {
	total := b.total - a.total
	if total <= 0 {
		return 0, errNoHostTime
	}
	return (b.steal - a.steal) / total, nil
}

// stolenSince is the share stolen from before (read with error err) to
// now.
func stolenSince(before hostCPU, err error) (float64, error) {
	if err != nil {
		return 0, err
	}
	after, err := readHostCPU()
	if err != nil {
		return 0, err
	}
	return stolenShare(before, after)
}
