package recorder

import (
	"strings"
	"testing"

	"github.com/iocorr/iocorr/wire"
)

func TestKilledUnderNamesWhatTheLimitCharged(t *testing.T) {
	tests := []struct {
		name      string
		cs        []bufCopy
		peak      uint64
		want      []string
		wantNoAdv bool
	}{
		{"nothing copied: the command itself", nil, 0, []string{"the 16MiB memory limit may be too small for the command itself", "no weight was copied"}, true},
		{"a repack names its flag", []bufCopy{{"CPU_REPACK", 24 << 20, 57}}, 16 << 20, []string{"CPU_REPACK 24.0 MiB in 57 weights", "under a 16MiB memory limit, peak 16.0 MiB", "--no-repack"}, false},
		{"a read load names mmap", []bufCopy{{"CPU", 30 << 20, 80}}, 0, []string{"CPU 30.0 MiB in 80 weights", "rather than mapped"}, false},
		{"a GPU's copies are named, without advice", []bufCopy{{"Vulkan0", 8 << 20, 9}}, 0, []string{"Vulkan0 8.0 MiB in 9 weights"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := killedUnder(16<<20, tc.peak, tc.cs)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("%q lacks %q", got, w)
				}
			}
			if tc.wantNoAdv && strings.Contains(got, "--no-repack") {
				t.Errorf("%q advises --no-repack", got)
			}
		})
	}
}

func TestCopiesSumsWeightsFromTheModelByBufferName(t *testing.T) {
	var c copies
	name := func(buf uint64, s string) *wire.BufnameEvent {
		e := &wire.BufnameEvent{Buffer: buf}
		for i := range len(s) {
			e.Name[i] = int8(s[i])
		}
		return e
	}
	c.onPlace(&wire.PlaceEvent{Buffer: 1, Size: 100}, true)
	c.onBufName(name(1, "CPU_REPACK"))
	c.onPlace(&wire.PlaceEvent{Buffer: 2, Size: 300}, true)
	c.onBufName(name(2, "CPU_REPACK"))
	c.onPlace(&wire.PlaceEvent{Buffer: 3, Size: 50}, true)   // never named
	c.onPlace(&wire.PlaceEvent{Buffer: 1, Size: 999}, false) // not from a model
	got := c.byName()
	want := []bufCopy{{"CPU_REPACK", 400, 2}, {"a buffer of no name", 50, 1}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("byName: %+v, want %+v", got, want)
	}
}
