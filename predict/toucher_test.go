//go:build linux

package predict

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// readAheadPages is read_ahead_kb of the disk holding path, in pages.
func readAheadPages(t *testing.T, path string) int32 {
	t.Helper()
	id, err := blockdev.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := blockdev.Of(id)
	if err != nil {
		t.Skipf("no block device under %s: %v", path, err)
	}
	b, err := os.ReadFile(filepath.Join("/sys/block", blockdev.DiskName(bd), "queue", "read_ahead_kb"))
	if err != nil {
		t.Skipf("read_ahead_kb unknown: %v", err)
	}
	kb, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return int32(kb * 1024 / pageSize)
}

// settledResidency counts file's pages in the page cache once the reads
// in flight have ended: mincore counts a page only when it is up to date,
// and a read-around's pages past the faulting one are still being read
// when the toucher exits (the window's second half arrives milliseconds
// later).
func settledResidency(t *testing.T, file string) int64 {
	t.Helper()
	last, same := int64(-1), 0
	for range 200 {
		n, _, err := pagecache.Residency(file)
		if err != nil {
			t.Fatal(err)
		}
		if n == last {
			if same++; same == 5 {
				return n
			}
		} else {
			last, same = n, 0
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the residency of %s never settled (last %d pages)", file, last)
	return 0
}

// The ground-truth toucher with the kernel's read-around on (-advice
// normal), cold, with room for the whole file: what the kernel reads is
// exact (each first touch of a missing page reads one window, and nothing
// is evicted), and mincore after the run counts it. The kernel model fed
// the toucher's stream as it touched it, at the disk's read_ahead_kb, must
// read exactly those pages in exactly as many faults. Fewer than 100
// faults, so the kernel's mmap_miss back-off (MMAP_LOTSAMISS) never stops
// the read-around.
func TestTheKernelModelReadsWhatTheKernelReadsForATouchersStream(t *testing.T) {
	testenv.RequireRoot(t)
	toucher := llmtest.BuildToucher(t)
	const filePages = 8192
	file := llmtest.ColdFile(t, filePages*pageSize)
	ra := readAheadPages(t, file)
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
			resident := settledResidency(t, file)
			c := newPageCache(filePages, filePages, ra, nil)
			for _, p := range tc.pages {
				c.access(pageRange{p, p + 1})
			}
			if int64(c.readPages) != resident || int64(c.majors) != rep.MajFlt {
				t.Errorf("pages %v, read-around %d pages: the model read %d pages in %d faults, the kernel %d pages (mincore) in %d major faults",
					tc.pages, ra, c.readPages, c.majors, resident, rep.MajFlt)
				// What a failure needs to be explained (one fresh clone's
				// make test once had 5 pages fewer in the kernel, not seen in
				// 30 runs since): where the two differ.
				ranges, _, err := pagecache.ResidentRanges(file)
				if err != nil {
					t.Fatal(err)
				}
				var model [][2]int64
				for p := int32(0); p < filePages; p++ {
					if !c.resident(p) {
						continue
					}
					if n := len(model); n > 0 && model[n-1][1] == int64(p) {
						model[n-1][1]++
					} else {
						model = append(model, [2]int64{int64(p), int64(p) + 1})
					}
				}
				t.Logf("resident page ranges [first, end): the kernel %v, the model %v", ranges, model)
			}
		})
	}
}
