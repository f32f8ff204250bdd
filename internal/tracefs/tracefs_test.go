package tracefs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestEnsureMountsTracefsWhereNoneIs points Mounts at an empty directory,
// as a machine booted without tracefs has it, and holds Ensure to
// mounting it there (as root) and saying so; a second call finds it.
func TestEnsureMountsTracefsWhereNoneIs(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("IOCORR_REQUIRE_BPF") != "" {
			t.Fatal("mounting tracefs needs root")
		}
		t.Skip("mounting tracefs needs root")
	}
	dir := filepath.Join(t.TempDir(), "tracing")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	defer func(m []string) { Mounts = m }(Mounts)
	Mounts = []string{dir}
	if Dir() != "" {
		t.Fatalf("an empty directory taken for tracefs")
	}
	got, mounted, err := Ensure()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir, 0)
	if got != dir || !mounted {
		t.Fatalf("Ensure: %q, mounted %v; want %q, true", got, mounted, dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "events", "block")); err != nil {
		t.Fatalf("the mounted tracefs has no block events: %v", err)
	}
	if again, mounted, err := Ensure(); err != nil || again != dir || mounted {
		t.Fatalf("Ensure again: %q, mounted %v, %v; want %q, false", again, mounted, err, dir)
	}
}

// TestEnsureSaysTheMountCommandWhenItMayNotMount has a mount point that
// cannot take a mount (a regular file).
func TestEnsureSaysTheMountCommandWhenItMayNotMount(t *testing.T) {
	file := filepath.Join(t.TempDir(), "not-a-dir")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	defer func(m []string) { Mounts = m }(Mounts)
	Mounts = []string{file}
	_, _, err := Ensure()
	if err == nil || (!strings.Contains(err.Error(), Hint) && !strings.Contains(err.Error(), "mounting tracefs at "+file)) {
		t.Fatalf("Ensure on a file: %v", err)
	}
}
