//go:build linux

package llmtest

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/blockdev"
)

func touch(t *testing.T, toucher, file, pages string, evict bool, extra ...string) ToucherReport {
	t.Helper()
	args := []string{"-file", file, "-pages", pages}
	if evict {
		args = append(args, "-evict")
	}
	args = append(args, extra...)
	out, err := exec.Command(toucher, args...).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("toucher %s: %v: %s", strings.Join(args, " "), err, stderr)
	}
	var r ToucherReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("toucher printed %q: %v", out, err)
	}
	return r
}

// TestToucherMajorFaultsEqualDistinctColdPagesTouched pins the kernel
// behaviour that the fault-attribution ground truth rests on: with
// readahead off, each distinct cold page touched is exactly one major
// fault — adjacent pages too, and a page touched again is none.
func TestToucherMajorFaultsEqualDistinctColdPagesTouched(t *testing.T) {
	toucher := BuildToucher(t)
	tests := []struct {
		name     string
		pages    string
		distinct int
	}{
		{"scattered pages", "3,17,42", 3},
		{"adjacent pages each fault: no readahead", "100,101,102,103,104", 5},
		{"a page touched again faults once", "7,9,7,9,7", 2},
		{"descending order", "250,200,150,1", 4},
		{"first and last page", "0,255", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := ColdFile(t, 256*os.Getpagesize())
			r := touch(t, toucher, file, tc.pages, true)
			if r.Resident != 0 {
				t.Fatalf("%d pages stayed resident after %d eviction rounds", r.Resident, r.EvictTries)
			}
			if len(r.Offsets) != len(strings.Split(tc.pages, ",")) {
				t.Fatalf("touched %d offsets, asked for %s", len(r.Offsets), tc.pages)
			}
			for i, p := range r.Pages {
				if r.Offsets[i] != p*int64(r.PageSize) {
					t.Errorf("touch %d: offset %d, want page %d × %d", i, r.Offsets[i], p, r.PageSize)
				}
			}
			if r.MajFlt != int64(tc.distinct) {
				t.Errorf("majflt %d, want %d (one per distinct page); minflt %d", r.MajFlt, tc.distinct, r.MinFlt)
			}
			t.Logf("pages %s: majflt %d, minflt %d, eviction rounds %d", tc.pages, r.MajFlt, r.MinFlt, r.EvictTries)
		})
	}
}

// TestToucherFindsAWarmFileWithoutMajorFaults: without -evict, pages the
// page cache holds (a file just written) are never read from the disk.
func TestToucherFindsAWarmFileWithoutMajorFaults(t *testing.T) {
	toucher := BuildToucher(t)
	file := ColdFile(t, 64*os.Getpagesize())
	r := touch(t, toucher, file, "1,2,30,63", false)
	if r.Resident != 64 {
		t.Errorf("%d of 64 pages resident after writing the file", r.Resident)
	}
	if r.MajFlt != 0 {
		t.Errorf("majflt %d on a cached file", r.MajFlt)
	}
}

func TestToucherRejectsAPageOutsideTheFile(t *testing.T) {
	toucher := BuildToucher(t)
	file := ColdFile(t, 4*os.Getpagesize())
	out, err := exec.Command(toucher, "-file", file, "-pages", "1,4").CombinedOutput()
	if err == nil {
		t.Fatalf("toucher touched page 4 of a 4-page file: %s", out)
	}
	if !strings.Contains(string(out), "not in the file") {
		t.Errorf("error %q does not say the page is outside the file", out)
	}
}

// TestToucherRandomOrderIsAReproducibleShuffle: -random touches exactly
// the listed pages in an order the seed fixes, and the report lists them
// in the order touched.
func TestToucherRandomOrderIsAReproducibleShuffle(t *testing.T) {
	toucher := BuildToucher(t)
	file := ColdFile(t, 256*os.Getpagesize())
	const pages = "3,17,42,99,100,101,200,255"
	listed := []int64{3, 17, 42, 99, 100, 101, 200, 255}
	a := touch(t, toucher, file, pages, true, "-random", "-seed", "11")
	b := touch(t, toucher, file, pages, true, "-random", "-seed", "11")
	c := touch(t, toucher, file, pages, true, "-random", "-seed", "12")
	if !slices.Equal(a.Pages, b.Pages) {
		t.Errorf("seed 11 touched %v, then %v", a.Pages, b.Pages)
	}
	if slices.Equal(a.Pages, c.Pages) || slices.Equal(a.Pages, listed) {
		t.Errorf("seed 11 touched %v, seed 12 %v, listed %v: no shuffle", a.Pages, c.Pages, listed)
	}
	for _, r := range []ToucherReport{a, c} {
		if r.Seed == nil {
			t.Errorf("no seed reported")
		}
		if got := slices.Sorted(slices.Values(r.Pages)); !slices.Equal(got, listed) {
			t.Errorf("touched pages %v, not a permutation of %v", r.Pages, listed)
		}
		for i, p := range r.Pages {
			if r.Offsets[i] != p*int64(r.PageSize) {
				t.Errorf("touch %d: offset %d is not page %d", i, r.Offsets[i], p)
			}
		}
		if r.MajFlt != int64(len(listed)) {
			t.Errorf("majflt %d in shuffled order, want %d", r.MajFlt, len(listed))
		}
	}
}

// TestToucherWaitsForStdinOrSIGUSR1 holds the touches back until a
// tracer could have attached: nothing is touched (no report) before the
// go, and the faults still equal the pages once it comes.
func TestToucherWaitsForStdinOrSIGUSR1(t *testing.T) {
	toucher := BuildToucher(t)
	tests := []struct {
		name    string
		closeIn bool // stdin at its end: only the signal may start it
		signal  bool
		want    string
	}{
		{"a byte on stdin", false, false, "stdin"},
		{"SIGUSR1", false, true, "SIGUSR1"},
		{"SIGUSR1 after stdin ended", true, true, "SIGUSR1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := ColdFile(t, 64*os.Getpagesize())
			w := StartWaitingToucher(t, toucher, "-file", file, "-pages", "5,6,40", "-evict")
			if tc.closeIn {
				if err := w.CloseStdin(); err != nil {
					t.Fatal(err)
				}
			}
			// Long enough for a toucher that does not wait to finish.
			time.Sleep(300 * time.Millisecond)
			if out := w.Printed(); len(out) > 0 {
				t.Fatalf("toucher touched before the go: %s", out)
			}
			var err error
			if tc.signal {
				err = w.Cmd.Process.Signal(syscall.SIGUSR1)
			} else {
				err = w.Go()
			}
			if err != nil {
				t.Fatal(err)
			}
			r, err := w.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if r.WokenBy != tc.want {
				t.Errorf("woken by %q, want %q", r.WokenBy, tc.want)
			}
			if r.Resident != 0 || r.MajFlt != 3 {
				t.Errorf("%d pages resident before, majflt %d; want 0 and 3", r.Resident, r.MajFlt)
			}
		})
	}
}

// readAheadPages is the readahead window, in pages, of the block device
// that holds file (blockdev.Of's, which meta.json records), or 0 when
// sysfs does not say: the test below holds the kernel's faults to it.
func readAheadPages(t *testing.T, file string) int64 {
	t.Helper()
	id, err := blockdev.StatFile(file)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := blockdev.Of(id)
	if err != nil || bd.ReadAheadKB == nil {
		return 0
	}
	return int64(*bd.ReadAheadKB) * 1024 / int64(os.Getpagesize())
}

// TestToucherWithoutMADVRandomFaultsOncePerReadaheadWindow documents why
// the toucher turns readahead off. With the default advice, the first
// fault on a cold page reads a whole window of read_ahead_kb around it
// (Linux's do_sync_mmap_readahead: from page - window/2, window pages)
// and every later touch inside a page read so is no major fault at all.
// Measured here (read_ahead_kb 8192, a 4096-page file): pages 3,17,42 →
// 1 major fault; 100,3000,4000 → 2; 0,2048,4095 → 3; also in reverse.
func TestToucherWithoutMADVRandomFaultsOncePerReadaheadWindow(t *testing.T) {
	toucher := BuildToucher(t)
	const filePages = 4096
	file := ColdFile(t, filePages*os.Getpagesize())
	window := readAheadPages(t, file)
	if window < 64 || window > filePages/2 {
		t.Skipf("readahead window of %d pages: the cases below assume 64 to %d", window, filePages/2)
	}
	// A cold page faults and reads [p-window/2, p+window/2), clipped to
	// the file; a page read earlier does not fault.
	predict := func(pages []int64) int64 {
		cached := map[int64]bool{}
		var n int64
		for _, p := range pages {
			if cached[p] {
				continue
			}
			n++
			for q := max(0, p-window/2); q < min(filePages, max(0, p-window/2)+window); q++ {
				cached[q] = true
			}
		}
		return n
	}
	tests := []struct {
		name  string
		pages []int64
	}{
		{"scattered pages inside one window", []int64{3, 17, 42}},
		{"ten adjacent pages", []int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
		{"two windows apart", []int64{100, window + window/2, window + window/2 + window/4}},
		{"start, middle and end", []int64{0, filePages / 2, filePages - 1}},
		{"end, start and middle", []int64{filePages - 1, 0, filePages / 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var list []string
			for _, p := range tc.pages {
				list = append(list, strconv.FormatInt(p, 10))
			}
			r := touch(t, toucher, file, strings.Join(list, ","), true, "-advice", "normal")
			if want := predict(tc.pages); r.MajFlt != want {
				t.Errorf("pages %v with readahead (window %d pages): majflt %d, want %d", tc.pages, window, r.MajFlt, want)
			}
			t.Logf("pages %v, window %d pages: majflt %d", tc.pages, window, r.MajFlt)
		})
	}
}
