package recorder

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

func blockRecord(sector uint64) []byte {
	e := &wire.BlockEvent{Sector: sector, Bytes: 4096}
	e.Hdr.Type = uint16(wire.EventTypeEV_BLOCK)
	return ingest.Bytes(e)
}

func faultCountRecord(n uint64) []byte {
	e := &wire.FaultCountEvent{Count: n}
	e.Hdr.Type = uint16(wire.EventTypeEV_FAULT_COUNT)
	return ingest.Bytes(e)
}

func TestSpoolAppendedRecordsAreCountedByTypeAndReadBackInOrder(t *testing.T) {
	dir := t.TempDir()
	s, err := createSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ wire.EventType
		rec []byte
	}{
		{wire.EventTypeEV_BLOCK, blockRecord(8)},
		{wire.EventTypeEV_FAULT_COUNT, faultCountRecord(3)},
		{wire.EventTypeEV_BLOCK, blockRecord(16)},
	}
	for _, w := range want {
		if err := s.append(w.typ, w.rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if b, f, all := s.counts.Get(uint32(wire.EventTypeEV_BLOCK)), s.counts.Get(uint32(wire.EventTypeEV_FAULT_COUNT)), s.counts.Total(); b != 2 || f != 1 || all != 3 {
		t.Errorf("counts: %d block, %d fault count, %d in all; want 2, 1, 3", b, f, all)
	}
	rd, err := ingest.OpenSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for i, w := range want {
		got, err := rd.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !bytes.Equal(got, w.rec) {
			t.Errorf("record %d differs from the one appended", i)
		}
	}
	if _, err := rd.Next(); !errors.Is(err, io.EOF) {
		t.Errorf("after the appended records: %v, want the end", err)
	}
}

func TestCreateSpoolRefusesARunDirectoryThatHasOne(t *testing.T) {
	dir := t.TempDir()
	s, err := createSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.close(); err != nil {
		t.Fatal(err)
	}
	if _, err := createSpool(dir); err == nil {
		t.Fatal("a second spool replaced the first")
	}
}

// The spool is closed by end, for its error, and again by Run's defer:
// the second close must neither close a file twice nor lose the first's
// error (a full disk is the one a recording meets).
func TestSpoolCloseRunsOnceAndEveryCallReturnsItsError(t *testing.T) {
	tests := []struct {
		name string
		full bool
		want error
	}{
		{"room on the disk", false, nil},
		{"a full disk", true, syscall.ENOSPC},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.full {
				testenv.RequireRoot(t)
				if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
					t.Fatalf("mounting a small tmpfs: %v", err)
				}
				defer syscall.Unmount(dir, syscall.MNT_DETACH)
			}
			s, err := createSpool(dir)
			if err != nil {
				t.Fatal(err)
			}
			// 128 KiB of records: twice the small disk, within the
			// writer's buffer, so that only the close meets the disk.
			for i := range 128 << 10 / (len(blockRecord(0)) + 8) {
				if err := s.append(wire.EventTypeEV_BLOCK, blockRecord(uint64(i))); err != nil {
					t.Fatal(err)
				}
			}
			first, second := s.close(), s.close()
			if !errors.Is(first, tc.want) || (tc.want == nil) != (first == nil) {
				t.Fatalf("close: %v, want %v", first, tc.want)
			}
			if second != first {
				t.Errorf("second close: %v, want the first's %v", second, first)
			}
		})
	}
}
