//go:build linux

package blocktrace

import (
	"slices"
	"testing"

	"github.com/iocorr/iocorr/internal/kernel"
)

// A file's extents lie on its partition; completions come in the disk's
// sectors: the two meet at the partition's first sector, and a
// completion maps back onto the file's bytes extent by extent.
func TestACompletionMapsBackOntoTheFileThroughItsPartitionsStart(t *testing.T) {
	f := File{Device: kernel.BlockDevice{PartStartSector: 2048}, Extents: []kernel.Extent{
		{Logical: 0, Physical: 1 << 20, Length: 8192},
		{Logical: 8192, Physical: 4 << 20, Length: 4096},
	}}
	if got, want := f.Sectors(), []Range{{2048 + 2048, 2048 + 2048 + 16}, {2048 + 8192, 2048 + 8192 + 8}}; !slices.Equal(got, want) {
		t.Errorf("sectors %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name     string
		c        Completion
		spans    [][2]uint64
		overlaps bool
	}{
		{"inside the first extent", Completion{Sector: 2048 + 2048 + 8, Sectors: 8}, [][2]uint64{{4096, 8192}}, true},
		{"the second extent, whole", Completion{Sector: 2048 + 8192, Sectors: 8}, [][2]uint64{{8192, 12288}}, true},
		{"straddling the first's end", Completion{Sector: 2048 + 2048 + 12, Sectors: 16}, [][2]uint64{{6144, 8192}}, true},
		{"the partition's sectors before the file", Completion{Sector: 2048, Sectors: 8}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got [][2]uint64
			f.Spans([]Completion{tc.c}, func(lo, hi uint64) { got = append(got, [2]uint64{lo, hi}) })
			if !slices.Equal(got, tc.spans) || f.Overlaps(tc.c.Sector, tc.c.Sectors) != tc.overlaps {
				t.Errorf("spans %v (overlaps %v), want %v (%v)", got, f.Overlaps(tc.c.Sector, tc.c.Sectors), tc.spans, tc.overlaps)
			}
		})
	}
}
