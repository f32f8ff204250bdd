package procmaps

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadFindsAFileThisProcessMapped maps a file whose name has spaces
// and checks the kernel's own line for it against stat.
func TestReadFindsAFileThisProcessMapped(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a model  with spaces.gguf")
	if err := os.WriteFile(p, make([]byte, 3*os.Getpagesize()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pg := os.Getpagesize()
	b, err := unix.Mmap(int(f.Fd()), int64(pg), 2*pg, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	ms, err := Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var found *Mapping
	for i := range ms {
		if ms[i].Path == p {
			found = &ms[i]
		}
	}
	if found == nil {
		t.Fatalf("no mapping of %s among %d", p, len(ms))
	}
	want := Mapping{
		Start: found.Start, End: found.Start + uint64(2*pg), Perms: "r--s", Offset: uint64(pg),
		Major: unix.Major(st.Dev), Minor: unix.Minor(st.Dev), Inode: st.Ino, Path: p,
	}
	if *found != want || !found.Shared() {
		t.Errorf("got  %+v\nwant %+v", *found, want)
	}
	// Unlinked while mapped, the same mapping says so.
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	ms, err = Read(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.Start == found.Start {
			if m.Path != p || !m.Deleted {
				t.Errorf("after unlink: %+v, want %s deleted", m, p)
			}
			return
		}
	}
	t.Errorf("the mapping at %#x is gone after unlink", found.Start)
}
