//go:build linux

package blocktrace

import (
	"testing"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/kernel"
)

// File is where a file lies on its disk: its block device (DiskDev, the
// disk the completions come from; PartStartSector, the first sector of
// the partition holding it: FIEMAP's offsets are the partition's, a
// completion's sector the disk's) and the file's extents.
type File struct {
	Extents []kernel.Extent
	Device  kernel.BlockDevice
}

// Disk is the device number of the disk the file's completions come from.
func (f File) Disk() uint32 { return f.Device.DiskDev }

// OpenFile finds where path lies; a file on no block device (a tmpfs)
// skips the test.
func OpenFile(t testing.TB, path string) File {
	t.Helper()
	id, err := blockdev.StatFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bd, err := blockdev.Of(id)
	if err != nil {
		t.Skipf("no block device under %s: %v", path, err)
	}
	exts, err := blockdev.Extents(path)
	if err != nil {
		t.Fatal(err)
	}
	return File{Extents: exts, Device: bd}
}

// Sectors are the disk sectors of the file's extents: what a trace of
// its reads filters on.
func (f File) Sectors() []Range {
	out := make([]Range, len(f.Extents))
	for i, e := range f.Extents {
		out[i] = Range{Start: f.Device.PartStartSector + e.Physical/512, End: f.Device.PartStartSector + (e.Physical+e.Length+511)/512}
	}
	return out
}

// Spans calls fn with each span [lo, hi) of the file's bytes a completion
// read, mapped back through the extents.
func (f File) Spans(cs []Completion, fn func(lo, hi uint64)) {
	for _, c := range cs {
		lo, hi := (c.Sector-f.Device.PartStartSector)*512, (c.Sector-f.Device.PartStartSector+c.Sectors)*512
		for _, e := range f.Extents {
			if a, b := max(lo, e.Physical), min(hi, e.Physical+e.Length); a < b {
				fn(a-e.Physical+e.Logical, b-e.Physical+e.Logical)
			}
		}
	}
}

// Overlaps says whether disk sectors [sector, sector+sectors) hold any
// of the file's.
func (f File) Overlaps(sector, sectors uint64) bool {
	for _, r := range f.Sectors() {
		if sector < r.End && sector+sectors > r.Start {
			return true
		}
	}
	return false
}
