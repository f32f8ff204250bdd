package blockdev

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// One WILLNEED call reads up to the larger of the device's read-ahead
// and its largest request (force_page_cache_ra): the helper asks in calls
// of that size, no smaller (more calls and smaller requests) and no
// larger (the kernel drops the rest silently).
func TestAWillNeedCallAsksWhatTheKernelReadsOfOne(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ra     *uint64 // the disk's read_ahead_kb (nil unknown)
		maxReq string  // its queue's max_sectors_kb ("" absent)
		want   int64
		ok     bool
	}{
		{"a small read-ahead on a disk of large requests: the request", kb(128), "4096", 4 << 20, true},
		{"a read-ahead above the largest request: the read-ahead", kb(8192), "4096", 8 << 20, true},
		{"no largest request known: the read-ahead", kb(512), "", 512 << 10, true},
		{"no read-ahead: none", nil, "4096", 0, false},
		{"a read-ahead of 0 (turned off): none", kb(0), "4096", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := t.TempDir()
			if tc.maxReq != "" {
				if err := os.WriteFile(filepath.Join(q, "max_sectors_kb"), []byte(tc.maxReq+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, ok := requestChunk(tc.ra, q)
			if got != tc.want || ok != tc.ok {
				t.Errorf("chunk %d (%v), want %d (%v)", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func kb(v uint64) *uint64 { return &v }

// Every byte the helper asks for is read: its calls are no larger than
// what the kernel reads of one on the disk the tests run on (the page
// cache holds exactly the bytes asked, mincore the oracle).
func TestEveryByteTheHelperAsksForIsRead(t *testing.T) {
	p := testenv.RandomDiskFile(t, 64<<20)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := WillNeedChunk(f)
	n := min(3*chunk, 48<<20)
	if _, _, err := pagecache.Evict(p); err != nil {
		t.Fatal(err)
	}
	if errno := pagecache.WillNeed(f, 0, n, chunk); errno != 0 {
		t.Fatalf("WILLNEED: errno %d", errno)
	}
	// The calls return before every page is in: wait until they stop
	// coming.
	var resident int64
	for last, still := int64(-1), time.Now(); resident*4096 < n && time.Since(still) < 2*time.Second; time.Sleep(10 * time.Millisecond) {
		if resident, _, err = pagecache.Residency(p); err != nil {
			t.Fatal(err)
		}
		if resident != last {
			last, still = resident, time.Now()
		}
	}
	if resident*4096 != n {
		t.Errorf("%d bytes in the page cache after asking %d in calls of %d: want exactly those", resident*4096, n, chunk)
	}
}
