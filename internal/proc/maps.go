package proc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/procmaps"
)

// SnapshotMaps copies /proc/PID/maps into the run directory's maps/ as
// the seq'th snapshot. Taken when a process maps a model file, it shows
// where the model sits in the address space beside everything else, and
// lets ingest resolve faults the kernel could not tie to a file. The copy
// is checked to parse (ingest refuses a malformed snapshot) and appears
// whole or not at all: a recorder killed while writing it leaves no torn
// file behind.
func SnapshotMaps(runDir string, seq, pid int, monoNS uint64) (procmaps.Snapshot, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return procmaps.Snapshot{}, fmt.Errorf("reading maps of %d: %w", pid, err)
	}
	if len(b) == 0 {
		// A process that already exited (a zombie) has no mappings left.
		return procmaps.Snapshot{}, fmt.Errorf("reading maps of %d: the process exited before they could be read", pid)
	}
	if _, err := procmaps.Parse(bytes.NewReader(b)); err != nil {
		return procmaps.Snapshot{}, fmt.Errorf("maps of %d: %w", pid, err)
	}
	dir := filepath.Join(runDir, procmaps.SnapshotDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return procmaps.Snapshot{}, fmt.Errorf("saving maps of %d: %w", pid, err)
	}
	rel := filepath.Join(procmaps.SnapshotDir, fmt.Sprintf("%04d-%d.txt", seq, pid))
	if err := atomicfile.WriteBytes(filepath.Join(runDir, rel), 0o644, false, b); err != nil {
		return procmaps.Snapshot{}, fmt.Errorf("saving maps of %d: %w", pid, err)
	}
	return procmaps.Snapshot{MonoNS: monoNS, PID: pid, File: rel}, nil
}
