package rundir

import (
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestBandwidthAtInterpolatesDepthsAndSizes(t *testing.T) {
	d := &DiskProfile{Points: []DiskPoint{
		{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 100},
		{Depth: 4, BlockBytes: 128 << 10, BytesPerSec: 400},
		{Depth: 1, BlockBytes: 1 << 20, BytesPerSec: 1000},
		{Depth: 4, BlockBytes: 1 << 20, BytesPerSec: 1600},
	}}
	for _, c := range []struct {
		name         string
		depth, bytes float64
		want         float64
	}{
		{"a measured point", 1, 1 << 20, 1000},
		{"between depths", 2.5, 1 << 20, 1300},
		{"below the shallowest", 0.5, 1 << 20, 1000},
		{"beyond the deepest", 32, 1 << 20, 1600},
		{"between sizes, by the size's logarithm: a third of the way", 4, 256 << 10, 400 + 1200.0/3},
		{"between sizes, two thirds of the way", 4, 512 << 10, 400 + 1200.0*2/3},
		{"below the smallest size", 1, 4 << 10, 100},
		{"beyond the largest size", 1, 8 << 20, 1000},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := d.BandwidthAt(c.depth, c.bytes)
			if !ok || math.Abs(got-c.want) > 1e-9 {
				t.Errorf("got %v (%v), want %v", got, ok, c.want)
			}
		})
	}
	if _, ok := (&DiskProfile{}).BandwidthAt(1, 1); ok {
		t.Error("a profile of no points gave a bandwidth")
	}
	// A span whose requests took no measurable time has a depth of 0/0.
	for _, c := range []struct{ depth, bytes float64 }{{math.NaN(), 4096}, {0, 4096}, {math.Inf(1), 4096}, {1, math.NaN()}, {1, 0}} {
		if bw, ok := d.BandwidthAt(c.depth, c.bytes); ok {
			t.Errorf("depth %v, %v-byte reads: a bandwidth of %v, want none", c.depth, c.bytes, bw)
		}
	}
}

func TestDepthGainIsTheBestDeeperPointOverTheSpansDepth(t *testing.T) {
	d := &DiskProfile{Points: []DiskPoint{
		{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 100},
		{Depth: 4, BlockBytes: 128 << 10, BytesPerSec: 400},
		{Depth: 16, BlockBytes: 128 << 10, BytesPerSec: 300},
		{Depth: 1, BlockBytes: 1 << 20, BytesPerSec: 1000},
		{Depth: 4, BlockBytes: 1 << 20, BytesPerSec: 900},
	}}
	for _, c := range []struct {
		name         string
		depth, bytes float64
		want         float64
	}{
		{"depth 1 of reads that gain at depth", 1, 128 << 10, 4},
		{"between depths, against the interpolated bandwidth", 2.5, 128 << 10, 400.0 / 250},
		{"at the best depth: nothing beyond serves more", 4, 128 << 10, 1},
		{"beyond the best depth: the deepest point's, no gain", 32, 128 << 10, 1},
		{"reads whose deeper points serve less", 1, 1 << 20, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := d.DepthGain(c.depth, c.bytes)
			if !ok || math.Abs(got-c.want) > 1e-9 {
				t.Errorf("got %v (%v), want %v", got, ok, c.want)
			}
		})
	}
	if g, ok := (&DiskProfile{}).DepthGain(1, 4096); ok {
		t.Errorf("a profile of no points gave a gain of %v", g)
	}
}

func TestADiskProfileIsKeptPerDiskAndReadBack(t *testing.T) {
	t.Setenv(DiskProfilesEnv, filepath.Join(t.TempDir(), "disks"))
	const dev = 254<<20 | 16
	if p, err := ReadDiskProfile(dev); p != nil || err != nil {
		t.Fatalf("a disk never measured: %v, %v", p, err)
	}
	want := &DiskProfile{Device: "254:16 vdb", Measured: time.Date(2026, 12, 4, 13, 0, 0, 0, time.UTC),
		Points: []DiskPoint{{Depth: 2, BlockBytes: 1 << 20, BytesPerSec: 2e9, MeanLatencyNs: 1e6}}}
	if err := WriteDiskProfile(dev, want); err != nil {
		t.Fatal(err)
	}
	if filepath.Base(DiskProfilePath(dev)) != "254:16.json" {
		t.Errorf("kept as %s", DiskProfilePath(dev))
	}
	got, err := ReadDiskProfile(dev)
	if err != nil || got.Device != want.Device || !got.Measured.Equal(want.Measured) || len(got.Points) != 1 || !reflect.DeepEqual(got.Points, want.Points) {
		t.Errorf("read back %+v, %v; want %+v", got, err, want)
	}
	m := Meta{Disk: got}
	if why := m.DiskNA(); why != "" {
		t.Errorf("a run with a profile: %s", why)
	}
	if why := (&Meta{}).DiskNA(); why == "" {
		t.Error("a run without a profile has no reason")
	}
}

// A point's spread is how far its rounds were apart over its median; a
// profile is unsteady at its point of the widest spread past
// UnsteadySpread, and steady where none is.
func TestAProfileIsUnsteadyWhereAPointsRoundsDisagree(t *testing.T) {
	pt := func(depth int, rounds ...float64) DiskPoint {
		s := slices.Clone(rounds)
		slices.Sort(s)
		return DiskPoint{Depth: depth, BlockBytes: 1 << 20, BytesPerSec: s[len(s)/2], RoundsBytesPerSec: rounds}
	}
	for _, tc := range []struct {
		name   string
		points []DiskPoint
		spread float64 // of the first point
		worst  int     // depth of the unsteady point, 0: none
	}{
		{"one round: no spread", []DiskPoint{pt(1, 100)}, 0, 0},
		{"rounds within half the median: steady", []DiskPoint{pt(1, 80, 100, 120)}, 0.4, 0},
		{"rounds 1 and 2 GB/s about 1.5: unsteady", []DiskPoint{pt(1, 1, 1.5, 2)}, 1.0 / 1.5, 1},
		{"the widest of two unsteady points", []DiskPoint{pt(1, 1, 1.5, 2), pt(4, 1, 1, 3)}, 1.0 / 1.5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &DiskProfile{Points: tc.points}
			if got := tc.points[0].Spread(); math.Abs(got-tc.spread) > 1e-9 {
				t.Errorf("spread %v, want %v", got, tc.spread)
			}
			switch w := d.Unsteady(); {
			case tc.worst == 0 && w != nil:
				t.Errorf("unsteady at depth %d, want steady", w.Depth)
			case tc.worst != 0 && (w == nil || w.Depth != tc.worst):
				t.Errorf("unsteady at %+v, want depth %d", w, tc.worst)
			}
		})
	}
}

// A read's latency at depth 1 is the read time's intercept at size 0
// through the two smallest sizes measured at depth 1 (their mean
// latencies, else size over bandwidth): the lab's virtio disk, 68 µs for
// 128 KiB and 500 for 1 MiB, answers 6 µs; a disk taking 2.4 ms for
// either, 2.4 ms. With one size, its whole read time; without a depth-1
// point, none.
func TestAReadsLatencyIsItsTimeBeforeItsBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		points []DiskPoint
		want   float64 // ns
		ok     bool
	}{
		{"the virtio disk", []DiskPoint{{Depth: 1, BlockBytes: 128 << 10, MeanLatencyNs: 68e3}, {Depth: 1, BlockBytes: 1 << 20, MeanLatencyNs: 500e3}, {Depth: 32, BlockBytes: 128 << 10, MeanLatencyNs: 1707e3}}, 68e3 - 131072*432e3/917504, true},
		{"a disk whose every read takes 2.4 ms", []DiskPoint{{Depth: 1, BlockBytes: 128 << 10, MeanLatencyNs: 2.4e6}, {Depth: 1, BlockBytes: 1 << 20, MeanLatencyNs: 2.4e6}}, 2.4e6, true},
		{"no latency: size over bandwidth", []DiskPoint{{Depth: 1, BlockBytes: 1 << 20, BytesPerSec: 1 << 30}}, 1e9 / 1024, true},
		{"one size: its whole time", []DiskPoint{{Depth: 1, BlockBytes: 128 << 10, MeanLatencyNs: 20e6}}, 20e6, true},
		{"no depth-1 point", []DiskPoint{{Depth: 32, BlockBytes: 128 << 10, MeanLatencyNs: 1e6}}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := (&DiskProfile{Points: tc.points}).ReadLatency()
			if ok != tc.ok || math.Abs(got-tc.want) > 1 {
				t.Errorf("latency %.0f ns (%v), want %.0f (%v)", got, ok, tc.want, tc.ok)
			}
		})
	}
	if _, ok := (*DiskProfile)(nil).ReadLatency(); ok {
		t.Error("no profile has a latency")
	}
}
