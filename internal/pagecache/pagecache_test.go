package pagecache

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/testkit/testenv"
)

func TestEvictEmptiesTheCacheOfOneFile(t *testing.T) {
	testenv.RequireRoot(t)
	tests := []struct {
		name    string
		prepare func(t *testing.T, p string) // leaves the file fully resident
	}{
		{"a file just written, still dirty", func(t *testing.T, p string) {}},
		{"a clean file read back into the cache", func(t *testing.T, p string) {
			if _, _, err := Evict(p); err != nil {
				t.Fatal(err)
			}
			if _, err := os.ReadFile(p); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := testenv.DiskFile(t, make([]byte, 8<<20))
			other := testenv.DiskFile(t, make([]byte, 1<<20))
			tc.prepare(t, p)
			res, pages, err := Residency(p)
			if err != nil {
				t.Fatal(err)
			}
			if res != pages || pages != 2048 {
				t.Fatalf("before: %d of %d pages resident, want all of 2048", res, pages)
			}
			res, pages, err = Evict(p)
			if err != nil {
				t.Fatal(err)
			}
			if res != 0 {
				t.Fatalf("after Evict %d of %d pages stayed resident", res, pages)
			}
			if res, _, _ := Residency(p); res != 0 {
				t.Fatalf("mincore after Evict: %d pages resident", res)
			}
			// Only the given file: another one stays cached.
			if res, pages, _ := Residency(other); res != pages {
				t.Fatalf("another file lost %d of its %d pages", pages-res, pages)
			}
		})
	}
}

// sink keeps the compiler from dropping loads made only to fault pages in.
var sink byte

func TestEvictReportsPagesAMappingKeepsResident(t *testing.T) {
	testenv.RequireRoot(t)
	p := testenv.DiskFile(t, make([]byte, 1<<20))
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, 1<<20, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	for i := 0; i < len(mem); i += 4096 {
		sink += mem[i]
	}
	res, pages, err := Evict(p)
	if err != nil {
		t.Fatal(err)
	}
	// FADV_DONTNEED does not unmap pages from page tables: a process that
	// has the model mapped keeps it cached, and Evict must say so.
	if real, _, _ := Residency(p); res != real || res == 0 {
		t.Fatalf("Evict reported %d of %d resident, mincore says %d; want the mapped pages reported", res, pages, real)
	}
	t.Logf("%d of %d pages stayed resident while mapped", res, pages)
}
