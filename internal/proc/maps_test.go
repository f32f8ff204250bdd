package proc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSnapshotMapsCopiesTheProcessMaps(t *testing.T) {
	dir := t.TempDir()
	snap, err := SnapshotMaps(dir, 3, os.Getpid(), 42)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, snap.File))
	if err != nil {
		t.Fatal(err)
	}
	if snap.PID != os.Getpid() || snap.MonoNS != 42 || !strings.HasPrefix(snap.File, "maps/0003-") || !strings.Contains(string(b), "[stack]") {
		t.Fatalf("snapshot %+v:\n%.200s", snap, b)
	}
}
