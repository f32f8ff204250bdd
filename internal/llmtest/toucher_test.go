package llmtest

import (
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// coldFile writes size random bytes to a file on the repository's disk:
// os.TempDir may be tmpfs, where a fault never reads from a device and so
// is never major.
func coldFile(t *testing.T, size int) string {
	t.Helper()
	root, err := Root()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp(root, ".coldfile-llmtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b := make([]byte, size)
	rand.Read(b)
	p := filepath.Join(dir, "cold.bin")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func touch(t *testing.T, toucher, file, pages string, evict bool) ToucherReport {
	t.Helper()
	args := []string{"-file", file, "-pages", pages}
	if evict {
		args = append(args, "-evict")
	}
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
			file := coldFile(t, 256*os.Getpagesize())
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
	file := coldFile(t, 64*os.Getpagesize())
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
	file := coldFile(t, 4*os.Getpagesize())
	out, err := exec.Command(toucher, "-file", file, "-pages", "1,4").CombinedOutput()
	if err == nil {
		t.Fatalf("toucher touched page 4 of a 4-page file: %s", out)
	}
	if !strings.Contains(string(out), "not in the file") {
		t.Errorf("error %q does not say the page is outside the file", out)
	}
}
