//go:build linux

package prefetch

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
)

// The releaser advises the pages a window's calls brought in at the
// addresses the process maps them at, and no others: the kernel takes
// MADV_COLD for exactly the calls' bytes where the file is mapped whole,
// for the mapped part where the mapping covers part of them, and for
// nothing, with the reason said, where the file is not mapped at all.
// The process is this test's own (process_madvise of oneself needs no
// privilege).
func TestReleaseAdvisesTheCallsPagesWhereTheProcessMapsThem(t *testing.T) {
	ps := int64(kernel.PageSize)
	path := filepath.Join(t.TempDir(), "model")
	if err := os.WriteFile(path, make([]byte, 64*ps), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	m := &model{path: path, dev: kernel.Dev(unix.Major(st.Dev), unix.Minor(st.Dev)), ino: st.Ino}
	tests := []struct {
		name         string
		mapOff, mapN int64 // pages of the file mapped; mapN 0: none
		first        int64
		calls        []*call
		want         int64 // pages advised
		na           string
	}{
		{"the calls' pages, where the file is mapped whole", 0, 64, 8, []*call{{lo: 0, hi: 4}, {lo: 10, hi: 16}}, 10, ""},
		{"only the mapped part of a call", 16, 16, 8, []*call{{lo: 4, hi: 12}}, 4, ""},
		{"nothing where the file is not mapped", 0, 0, 0, []*call{{lo: 0, hi: 8}}, 0, "maps no model file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.mapN > 0 {
				f, err := os.Open(path)
				if err != nil {
					t.Fatal(err)
				}
				b, err := unix.Mmap(int(f.Fd()), tc.mapOff*ps, int(tc.mapN*ps), unix.PROT_READ, unix.MAP_SHARED)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Munmap(b)
				for i := 0; i < len(b); i += int(ps) {
					_ = b[i] // mapped: in the page table, which the advice walks
				}
			}
			var rl releaser
			defer rl.close()
			w := &window{ranges: []*rng{{m: m, first: tc.first, calls: tc.calls}}}
			n, err := rl.release(w, os.Getpid())
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.want*ps {
				t.Errorf("advised %d bytes, want %d", n, tc.want*ps)
			}
			if na := rl.na(); (tc.na == "") != (na == "") || !strings.Contains(na, tc.na) {
				t.Errorf("NA %q, want %q", na, tc.na)
			}
		})
	}
}
