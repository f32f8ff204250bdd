package experiment

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/iocorr/iocorr/rundir"
)

// SnapshotMaps copies /proc/PID/maps into the run directory's maps/ as
// the seq'th snapshot. Taken when a process maps a model file, it shows
// where the model sits in the address space beside everything else; the
// BPF side already resolves fault addresses to file offsets, so this is
// for people and for checking, not for attribution.
func SnapshotMaps(runDir string, seq, pid int, monoNS uint64) (rundir.MapsSnapshot, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return rundir.MapsSnapshot{}, fmt.Errorf("reading maps of %d: %w", pid, err)
	}
	if len(b) == 0 {
		// A process that already exited (a zombie) has no mappings left.
		return rundir.MapsSnapshot{}, fmt.Errorf("reading maps of %d: the process exited before they could be read", pid)
	}
	dir := filepath.Join(runDir, rundir.MapsDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return rundir.MapsSnapshot{}, fmt.Errorf("saving maps of %d: %w", pid, err)
	}
	rel := filepath.Join(rundir.MapsDir, fmt.Sprintf("%04d-%d.txt", seq, pid))
	if err := os.WriteFile(filepath.Join(runDir, rel), b, 0o644); err != nil {
		return rundir.MapsSnapshot{}, fmt.Errorf("saving maps of %d: %w", pid, err)
	}
	return rundir.MapsSnapshot{MonoNS: monoNS, PID: pid, File: rel}, nil
}
