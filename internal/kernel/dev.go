package kernel

import "fmt"

// The kernel's internal dev_t (s_dev, and the dev fields of the filemap
// and block tracepoints) keeps the minor in the low 20 bits; stat's st_dev
// is another encoding (see unix.Major). Every number the BPF side records
// is the kernel's.
const minorBits = 20

// Dev encodes major and minor as the kernel does internally.
func Dev(major, minor uint32) uint32 { return major<<minorBits | minor }

// DevMajor is the major number of a kernel dev_t.
func DevMajor(dev uint32) uint32 { return dev >> minorBits }

// DevMinor is the minor number of a kernel dev_t.
func DevMinor(dev uint32) uint32 { return dev & (1<<minorBits - 1) }

// DevString writes a kernel dev_t as "major:minor", as /proc and sysfs do.
func DevString(dev uint32) string { return fmt.Sprintf("%d:%d", DevMajor(dev), DevMinor(dev)) }
