package recorder

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
)

// coldFile writes a file of size bytes to disk (not tmpfs: its pages must
// be evictable), syncs it and drops it from the page cache.
func coldFile(t testing.TB, size int64) *os.File {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Dir(os.Args[0]), "residency-")
	if err != nil {
		dir = t.TempDir()
	} else {
		t.Cleanup(func() { os.RemoveAll(dir) })
	}
	f, err := os.Create(filepath.Join(dir, "model"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	buf := make([]byte, size)
	for i := range buf {
		buf[i] = byte(i / kernel.PageSize)
	}
	if _, err := f.Write(buf); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	// Single pages only from here on: no readahead around a read.
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	return f
}

// cachestatOrSkip skips a test on a kernel without cachestat(2) (before
// Linux 6.5), where the recorder reads residency through mincore only.
func cachestatOrSkip(t *testing.T, f *os.File) {
	t.Helper()
	mem, err := unix.Mmap(int(f.Fd()), 0, kernel.PageSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if _, err := cachestatPages(f, mem, make([]byte, 1), cachestatChunk, nil); errors.Is(err, errNoCachestat) {
		t.Skipf("this kernel has no cachestat: %v", err)
	}
}

// On a file nobody else touches, cachestat's chunks (with mincore of the
// partly resident ones) give exactly the resident pages mincore of the
// whole mapping gives, page by page: none, all, one page in two, a few
// long runs, and a last page cut short by the end of the file.
func TestCachestatReadsTheResidentPagesMincoreReads(t *testing.T) {
	const pages = 1000
	cases := []struct {
		name  string
		size  int64
		touch func(p int64) bool
	}{
		{"none resident", pages * kernel.PageSize, func(int64) bool { return false }},
		{"all resident", pages * kernel.PageSize, func(int64) bool { return true }},
		{"every other page", pages * kernel.PageSize, func(p int64) bool { return p%2 == 0 }},
		{"a few long runs", pages * kernel.PageSize, func(p int64) bool { return p >= 100 && p < 350 || p >= 600 && p < 601 || p >= 900 }},
		{"a last page cut short", pages*kernel.PageSize - 100, func(p int64) bool { return p%7 == 3 || p == pages-1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := coldFile(t, c.size)
			cachestatOrSkip(t, f)
			mem, err := unix.Mmap(int(f.Fd()), 0, int(c.size), unix.PROT_READ, unix.MAP_SHARED)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Munmap(mem)
			// The pages are brought in by locking them through the mapping
			// (MADV_RANDOM: no readahead around them), not by reading them:
			// this machine's host runs DAMON's pageout on cold physical
			// memory (kdamond), and pages read in went before the check
			// (4 of 500 in a CI run). A locked page stays.
			if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
				t.Fatal(err)
			}
			var want int64
			for p := int64(0); p*kernel.PageSize < c.size; p++ {
				if !c.touch(p) {
					continue
				}
				want++
				if err := unix.Mlock(mem[p*kernel.PageSize : min((p+1)*kernel.PageSize, c.size)]); err != nil {
					t.Fatal(err)
				}
			}
			byMincore, err := mincorePages(mem, make([]byte, pages+1))
			if err != nil {
				t.Fatal(err)
			}
			// Chunks of one page, of some that end inside the file's last
			// chunk, and the recorder's, larger than the file; each from
			// no history, from a last snapshot that found every chunk in
			// each state (whatever it found, the pages are read again),
			// and from the history the first snapshot left.
			var byCachestat *rundir.PageMap
			for _, chunk := range []int64{1, 64, cachestatChunk * 4} {
				filled := func(st chunkState) []chunkState {
					h := newChunkStates(c.size, chunk)
					for i := range h {
						h[i] = st
					}
					return h
				}
				carried := newChunkStates(c.size, chunk)
				for _, h := range []struct {
					name string
					last []chunkState
				}{
					{"none", nil},
					{"carried from call to call", carried},
					{"every chunk empty", filled(chunkNone)},
					{"every chunk whole", filled(chunkAll)},
					{"every chunk partly resident", filled(chunkPart)},
					{"every chunk evicted", filled(chunkEvicted)},
					{"carried from call to call", carried},
				} {
					if byCachestat, err = cachestatPages(f, mem, make([]byte, pages+1), chunk, h.last); err != nil {
						t.Fatal(err)
					}
					if got, wantS := fmt.Sprint(byCachestat), fmt.Sprint(byMincore); got != wantS {
						t.Errorf("cachestat by chunks of %d pages (history: %s): %s\nmincore: %s", chunk, h.name, got, wantS)
					}
				}
			}
			// The oracle of both: the pages this test locked in, alone.
			if byMincore.Resident != want {
				t.Errorf("mincore says %d pages resident, the test locked in %d", byMincore.Resident, want)
			}
			for p := int64(0); p*kernel.PageSize < c.size; p++ {
				if byCachestat.Has(p) != c.touch(p) {
					t.Errorf("page %d: resident %v by cachestat, locked in %v", p, byCachestat.Has(p), c.touch(p))
					break
				}
			}
		})
	}
}

// BenchmarkSnapshotOfAPartlyResidentModel reads the residency of a file
// the size of the bench's model with 40% of it resident in 128 KiB runs
// (readahead's windows under a memory limit), the way a cold run leaves
// it: from no history (every chunk counted first, as before the chunks'
// states were kept), from the last snapshot's states, and by mincore of
// the whole mapping alone (the way of a kernel without cachestat).
func BenchmarkSnapshotOfAPartlyResidentModel(b *testing.B) {
	const size = 326 << 20
	f := coldFile(b, size)
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		b.Fatal(err)
	}
	const run = 32 * kernel.PageSize
	for off, i := 0, 0; off < size; off, i = off+run, i+1 {
		if (i*7919)%5 < 2 {
			if err := unix.Mlock(mem[off : off+run]); err != nil {
				b.Fatal(err)
			}
		}
	}
	vec := make([]byte, size/kernel.PageSize+1)
	for _, carried := range []bool{false, true} {
		b.Run(fmt.Sprintf("history=%v", carried), func(b *testing.B) {
			last := newChunkStates(size, cachestatChunk)
			for b.Loop() {
				h := last
				if !carried {
					h = newChunkStates(size, cachestatChunk)
				}
				if _, err := cachestatPages(f, mem, vec, cachestatChunk, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("mincore", func(b *testing.B) {
		for b.Loop() {
			if _, err := mincorePages(mem, vec); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A chunk whose pages the kernel reclaimed keeps their shadows, which
// cachestat reports as evicted: the chunk is read by mincore from then
// on (cachestat's recency test of every shadow costs twice mincore's
// lookup), and a page that comes back into it is found at the next
// snapshot. A chunk never read stays with cachestat.
func TestAChunkOfEvictedPagesIsReadByMincoreAndFindsAPageThatCameBack(t *testing.T) {
	const chunk = 64
	const pages = 3 * chunk
	size := int64(pages * kernel.PageSize)
	f := coldFile(t, size)
	cachestatOrSkip(t, f)
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	// Chunk 0 in, then reclaimed (MADV_PAGEOUT reclaims as the kernel's
	// own reclaim does, leaving shadows; fadvise DONTNEED would leave
	// none); chunk 1 never read; chunk 2 held.
	// Read through the mapping (MADV_RANDOM: no readahead), so that its
	// pages are mapped here, as MADV_PAGEOUT needs, and never mlocked.
	first := mem[:chunk*kernel.PageSize]
	var sum byte
	for p := 0; p < len(first); p += kernel.PageSize {
		sum += first[p]
	}
	runtime.KeepAlive(sum)
	if err := unix.Mlock(mem[2*chunk*kernel.PageSize:]); err != nil {
		t.Fatal(err)
	}
	// A folio just read sits in its CPU's LRU batch, and MADV_PAGEOUT
	// drains only the batches of the CPU it runs on: a folio still in
	// another CPU's batch is skipped (CI's run, with the chunk brought in
	// by mlock and munlock then, kept some of it so). Every CPU's are
	// drained before each try.
	var cached, evicted int64
	tries := 0
	for tries < 10 {
		tries++
		if err := pagecache.DrainLRUBatches(); err != nil {
			t.Fatal(err)
		}
		if err := unix.Madvise(first, unix.MADV_PAGEOUT); err != nil {
			t.Skipf("MADV_PAGEOUT: %v", err)
		}
		if cached, evicted, err = cachestatCount(f, 0, chunk); err != nil {
			t.Fatal(err)
		}
		if cached == 0 {
			break
		}
	}
	if cached != 0 {
		t.Fatalf("MADV_PAGEOUT left %d pages of the chunk in the page cache after %d tries", cached, tries)
	}
	t.Logf("the chunk was reclaimed in %d tries, %d shadows", tries, evicted)
	if evicted == 0 {
		t.Skip("the reclaimed chunk left no shadows: nothing to test on this kernel")
	}
	last := newChunkStates(size, chunk)
	vec := make([]byte, pages+1)
	pm, err := cachestatPages(f, mem, vec, chunk, last)
	if err != nil {
		t.Fatal(err)
	}
	if want := []chunkState{chunkEvicted, chunkNone, chunkAll}; fmt.Sprint(last) != fmt.Sprint(want) {
		t.Fatalf("chunk states %v, want %v", last, want)
	}
	if pm.Resident != chunk {
		t.Fatalf("%d pages resident, want the held chunk's %d", pm.Resident, chunk)
	}
	// One page of the evicted chunk comes back.
	back := int64(7)
	if err := unix.Mlock(mem[back*kernel.PageSize : (back+1)*kernel.PageSize]); err != nil {
		t.Fatal(err)
	}
	if pm, err = cachestatPages(f, mem, vec, chunk, last); err != nil {
		t.Fatal(err)
	}
	if !pm.Has(back) || pm.Resident != chunk+1 {
		t.Errorf("after page %d came back: %d resident (has it: %v), want %d", back, pm.Resident, pm.Has(back), chunk+1)
	}
	if last[0] != chunkPart {
		t.Errorf("the chunk a page came back to is %v, want partly resident (%v)", last[0], chunkPart)
	}
}
