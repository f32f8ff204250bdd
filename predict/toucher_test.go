//go:build linux

package predict

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/testkit/blocktrace"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// settleReads waits until the reads in flight have ended: a
// read-around's pages past the faulting one are still being read when the
// toucher exits (the window's second half arrives milliseconds later), and
// mincore counts a page only once it is up to date.
func settleReads(t *testing.T, file string) {
	t.Helper()
	last, same := int64(-1), 0
	for range 200 {
		n, _, err := pagecache.Residency(file)
		if err != nil {
			t.Fatal(err)
		}
		if n == last {
			if same++; same == 5 {
				return
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the residency of %s never settled (last %d pages)", file, last)
}

// fileDisk is where a file lies on its disk, with the disk's
// read-around.
type fileDisk struct {
	blocktrace.File
	// readAhead is the disk's read_ahead_kb in pages.
	readAhead int32
}

func openFileDisk(t *testing.T, path string) fileDisk {
	t.Helper()
	f := blocktrace.OpenFile(t, path)
	if f.Device.ReadAheadKB == nil {
		t.Skipf("read_ahead_kb of %s unknown", f.Device.Name)
	}
	return fileDisk{f, int32(*f.Device.ReadAheadKB * 1024 / pageSize)}
}

// pagesRead maps the disk's read completions back through the extents
// onto the file's pages: what the kernel read, which no later eviction
// changes (mincore's residency does: a page reclaimed under another
// process's pressure is read and yet not resident).
func (fd fileDisk) pagesRead(cs []blocktrace.Completion) map[int32]bool {
	read := map[int32]bool{}
	fd.Spans(cs, func(lo, hi uint64) {
		for off := lo &^ (pageSize - 1); off < hi; off += pageSize {
			read[int32(off/pageSize)] = true
		}
	})
	return read
}

// reclaimCounters reads the /proc/vmstat counters that move when the
// machine is short of memory.
func reclaimCounters(t *testing.T) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !(strings.HasPrefix(k, "pgsteal_") || strings.HasPrefix(k, "allocstall_") || strings.HasPrefix(k, "compact_") || k == "workingset_refault_file") {
			continue
		}
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			out[k] = n
		}
	}
	return out
}

// pageRanges lists a page set as [first, end) ranges.
func pageRanges(in func(int32) bool, n int32) [][2]int32 {
	var out [][2]int32
	for p := range n {
		if !in(p) {
			continue
		}
		if k := len(out); k > 0 && out[k-1][1] == p {
			out[k-1][1]++
		} else {
			out = append(out, [2]int32{p, p + 1})
		}
	}
	return out
}

// The ground-truth toucher with the kernel's read-around on (-advice
// normal), cold, with room for the whole file: what the kernel reads is
// exact (each first touch of a missing page reads one window), and the
// disk's read completions of the file's sectors (an ftrace of its own)
// say which pages it read. The kernel model fed
// the toucher's stream as it touched it, at the disk's read_ahead_kb, must
// read exactly those pages in exactly as many faults. Fewer than 100
// faults, so the kernel's mmap_miss back-off (MMAP_LOTSAMISS) never stops
// the read-around.
func TestTheKernelModelReadsWhatTheKernelReadsForATouchersStream(t *testing.T) {
	testenv.RequireRoot(t)
	toucher := llmtest.BuildToucher(t)
	const filePages = 8192
	file := llmtest.ColdFile(t, filePages*pageSize)
	fd := openFileDisk(t, file)
	ra := fd.readAhead
	if ra < 64 || ra > filePages/4 {
		t.Skipf("a read-around of %d pages: the streams below assume 64 to %d", ra, filePages/4)
	}
	for _, tc := range []struct {
		name  string
		pages []int32
	}{
		// The window is [p-ra/2, p+ra/2) moved inside the file: at its
		// start the kernel reads [0, ra), not a clipped half.
		{"the file's first page", []int32{0}},
		{"start, middle and end", []int32{3, filePages / 2, filePages - 1}},
		{"a window's neighbour, then inside it", []int32{ra, ra + ra/2 + 1, ra + 2}},
		{"descending, windows apart", []int32{filePages - 10, filePages - 10 - ra, filePages - 10 - 2*ra}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var list []string
			for _, p := range tc.pages {
				list = append(list, strconv.Itoa(int(p)))
			}
			vm0 := reclaimCounters(t)
			tr := blocktrace.Start(t, fd.Disk(), fd.Sectors())
			out, err := exec.Command(toucher, "-file", file, "-pages", strings.Join(list, ","), "-evict", "-advice", "normal").Output()
			if err != nil {
				t.Fatalf("toucher: %v", err)
			}
			var rep llmtest.ToucherReport
			if err := json.Unmarshal(out, &rep); err != nil {
				t.Fatalf("toucher printed %q: %v", out, err)
			}
			if rep.Resident != 0 {
				t.Fatalf("%d pages stayed resident through the eviction", rep.Resident)
			}
			settleReads(t, file)
			// A requeued request completes once, when the disk serves it:
			// the completions alone say what was read.
			tr.Stop(t)
			read := fd.pagesRead(tr.Completions)
			c := newPageCache(filePages, filePages, ra, nil)
			for _, p := range tc.pages {
				c.access(pageRange{p, p + 1})
			}
			if c.readPages != uint64(len(read)) || int64(c.majors) != rep.MajFlt {
				t.Errorf("pages %v, read-around %d pages: the model read %d pages in %d faults, the kernel %d pages (the disk's completions) in %d major faults",
					tc.pages, ra, c.readPages, c.majors, len(read), rep.MajFlt)
			}
			kernel := pageRanges(func(p int32) bool { return read[p] }, filePages)
			model := pageRanges(c.resident, filePages)
			if !slices.Equal(kernel, model) {
				t.Errorf("pages read [first, end): the kernel %v, the model %v", kernel, model)
			}
			if t.Failed() {
				// Readahead skips a page whose folio it cannot allocate
				// (it asks without retrying): what the machine's memory
				// did meanwhile tells that apart from a model error.
				vm1 := reclaimCounters(t)
				for k, v := range vm1 {
					if d := v - vm0[k]; d != 0 {
						t.Logf("/proc/vmstat %s +%d during the run", k, d)
					}
				}
			}
		})
	}
}
