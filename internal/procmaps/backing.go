package procmaps

import (
	"os"
	"strings"
)

// Backing is what backs a file mapping, as far as its name and the file
// system tell. Only a regular file that is still linked can be probed or
// read as a model: GPU drivers map host-visible memory from their device
// files (/dev/nvidia0, /dev/nvidiactl, /dev/dri/renderD128, /dev/kfd) and
// from memfds, and a process must not open those to look at them.
type Backing int

const (
	// BackingFile is a regular file, linked under its name.
	BackingFile Backing = iota
	// BackingDevice is a device node (a driver's mapping).
	BackingDevice
	// BackingMemfd is a memfd_create file ("/memfd:NAME (deleted)").
	BackingMemfd
	// BackingDeleted is a file unlinked while mapped; shmem's shared
	// /dev/zero mappings are named so too.
	BackingDeleted
	// BackingOther is anything else: no name, a pseudo name such as
	// [heap] or anon_inode:…, SYSV shared memory, a FIFO or socket.
	BackingOther
)

// memfdPrefix is how the kernel names a memfd_create file's mapping.
const memfdPrefix = "/memfd:"

// BackingOf says what backs the mapping of path, a name as /proc/PID/maps
// or /proc/PID/map_files print it (" (deleted)" kept); it stats the path,
// never opens it.
func BackingOf(path string) Backing {
	switch {
	case !strings.HasPrefix(path, "/"):
		return BackingOther
	case strings.HasPrefix(path, memfdPrefix):
		return BackingMemfd
	case strings.HasSuffix(path, deletedSuffix):
		return BackingDeleted
	case strings.HasPrefix(path, "/SYSV"):
		return BackingOther
	}
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return BackingOther
	case fi.Mode().IsRegular():
		return BackingFile
	case fi.Mode()&os.ModeDevice != 0:
		return BackingDevice
	}
	return BackingOther
}

// Name is the mapping's file as BackingOf takes it: the path with the
// kernel's " (deleted)" put back.
func (m Mapping) Name() string {
	if m.Deleted {
		return m.Path + deletedSuffix
	}
	return m.Path
}
