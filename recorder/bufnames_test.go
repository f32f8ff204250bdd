package recorder

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/rundir"
)

// TestAnUnreadBufferNameIsReadFromTheFileItsSnapshotMapsOrNotAtAll: the
// name at an address is the string at that offset of the file an
// unwritable mapping of the run's snapshots puts there, cut as the
// probe's read cuts it; anywhere else it is not read, and the error says
// why: no snapshot, no mapping, no file, a writable mapping, another
// file at the path now, two processes disagreeing.
func TestAnUnreadBufferNameIsReadFromTheFileItsSnapshotMapsOrNotAtAll(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libggml-base.so")
	data := make([]byte, 3*4096)
	copy(data[4096+16:], "CPU_Mapped\x00")
	copy(data[2*4096:], strings.Repeat("x", 100)) // no NUL within the probe's 64 bytes
	if err := os.WriteFile(lib, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(lib, &st); err != nil {
		t.Fatal(err)
	}
	line := func(start uint64, perms string, off uint64, ino uint64, path string) string {
		return fmt.Sprintf("%x-%x %s %08x %02x:%02x %d %s\n", start, start+0x2000, perms, off, unix.Major(st.Dev), unix.Minor(st.Dev), ino, path)
	}
	snap := func(name string, pid int, lines ...string) rundir.MapsSnapshot {
		if err := os.MkdirAll(filepath.Join(dir, rundir.MapsDir), 0o755); err != nil {
			t.Fatal(err)
		}
		rel := filepath.Join(rundir.MapsDir, name)
		if err := os.WriteFile(filepath.Join(dir, rel), []byte(strings.Join(lines, "")), 0o644); err != nil {
			t.Fatal(err)
		}
		return rundir.MapsSnapshot{PID: pid, File: rel}
	}
	// The library's second and third pages at 0x7000_1000, read-only.
	good := snap("good", 100, line(0x70001000, "r--p", 0x1000, st.Ino, lib),
		line(0x70010000, "rw-p", 0x1000, st.Ino, lib), line(0x70020000, "rw-p", 0, 0, ""),
		line(0x70030000, "r--p", 0x1000, st.Ino+1, lib),
		// A driver's read-only shared mappings: never opened.
		line(0x70040000, "r--s", 0, 142, "/dev/null"), line(0x70050000, "r-xs", 0, 1042, "/memfd:/.glXXXXXX (deleted)"))
	other := snap("other", 200, line(0x70001000, "r--p", 0, st.Ino, lib))
	tests := []struct {
		name  string
		snaps []rundir.MapsSnapshot
		tid   uint32
		addr  uint64
		want  string
		err   string
	}{
		{"a literal in .rodata", []rundir.MapsSnapshot{good}, 100, 0x70001010, "CPU_Mapped", ""},
		{"cut as the probe cuts it", []rundir.MapsSnapshot{good}, 100, 0x70002000, strings.Repeat("x", 63), ""},
		{"a thread of the process", []rundir.MapsSnapshot{good}, 101, 0x70001010, "CPU_Mapped", ""},
		{"its own process first", []rundir.MapsSnapshot{other, good}, 100, 0x70001010, "CPU_Mapped", ""},
		{"no snapshot", nil, 100, 0x70001010, "", "no maps snapshot"},
		{"no mapping", []rundir.MapsSnapshot{good}, 100, 0x1000, "", "in no mapping"},
		{"anonymous memory", []rundir.MapsSnapshot{good}, 100, 0x70020010, "", "no file"},
		{"a writable mapping", []rundir.MapsSnapshot{good}, 100, 0x70010010, "", "may not hold"},
		{"another file now", []rundir.MapsSnapshot{good}, 100, 0x70030010, "", "no longer the file"},
		{"a device file", []rundir.MapsSnapshot{good}, 100, 0x70040010, "", "no regular file"},
		{"a memfd", []rundir.MapsSnapshot{good}, 100, 0x70050010, "", "deleted since"},
		{"processes disagree", []rundir.MapsSnapshot{other, good}, 101, 0x70001010, "", "in one process's maps"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name, _, err := nameInFile(readSnapshots(dir, tc.snaps), bpf.UnreadBufName{Tid: tc.tid, Buffer: 1, Name: tc.addr}, 64)
			if name != tc.want || (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("name %q, error %v; want %q, an error saying %q", name, err, tc.want, tc.err)
			}
		})
	}
}
