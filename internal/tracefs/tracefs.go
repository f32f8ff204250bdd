// Package tracefs finds the kernel's tracing file system, and mounts it
// where it is missing and the process may: many machines (cloud VMs, a
// GPU box's Firecracker guest) boot without it, and tracepoints cannot be
// named without it.
package tracefs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Mounts are where tracefs may be, the newest place first; a mount made
// here goes to the first.
var Mounts = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// Dir is the mounted tracefs ("" when none): the first of Mounts whose
// events directory is there.
func Dir() string {
	for _, d := range Mounts {
		if _, err := os.Stat(filepath.Join(d, "events")); err == nil {
			return d
		}
	}
	return ""
}

// Ensure returns the mounted tracefs, mounting it at Mounts[0] when none
// is (mounted then says so, for the caller to tell its user). Without
// the privilege to mount, the error says the command that would.
func Ensure() (dir string, mounted bool, err error) {
	if d := Dir(); d != "" {
		return d, false, nil
	}
	if err := mountAt(Mounts[0]); err != nil {
		return "", false, err
	}
	return Mounts[0], true, nil
}

// Hint is the command that mounts tracefs, for an error of a tool that
// may not mount it itself.
const Hint = "mount -t tracefs nodev /sys/kernel/tracing"

func mountAt(dir string) error {
	if err := unix.Mount("nodev", dir, "tracefs", 0, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("tracefs is not mounted and this process may not mount it (as root: %s): %w", Hint, err)
		}
		return fmt.Errorf("mounting tracefs at %s: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "events")); err != nil {
		return fmt.Errorf("tracefs mounted at %s has no events: %w", dir, err)
	}
	return nil
}
