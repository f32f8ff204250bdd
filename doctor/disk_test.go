package doctor

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/internal/blockdev"
	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// diskFile is a file on the disk of size bytes: random data written
// through the page cache, or none (a hole) when sparse.
func diskFile(t *testing.T, size int64, sparse bool) string {
	t.Helper()
	p := testenv.DiskFile(t, nil)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if sparse {
		if err := f.Truncate(size); err != nil {
			t.Fatal(err)
		}
		return p
	}
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; off += int64(len(buf)) {
		rand.Read(buf)
		if _, err := f.Write(buf[:min(int64(len(buf)), size-off)]); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestMeasureDiskRefusesAFileThatWouldNotMeasureTheDisk(t *testing.T) {
	t.Setenv(rundir.DiskProfilesEnv, t.TempDir())
	for _, c := range []struct {
		name   string
		size   int64
		sparse bool
		want   string
	}{
		{"too small", 4 << 20, false, "reads at random over at least"},
		{"in the page cache (just written)", MinDiskFile, false, "in the page cache"},
		{"a hole", MinDiskFile + 1<<20, true, "written on the disk"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := diskFile(t, c.size, c.sparse)
			_, _, err := MeasureDisk(p, DiskOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// TestMeasureDiskReadsFromTheDevice measures a freshly written, evicted
// file's disk at two depths and sizes in two rounds, and holds what the
// profile says was read to /proc/diskstats: each point's every round ran
// at least PerPoint at its bandwidth, so the disk read at least that many
// bytes meanwhile (other I/O on the machine only adds). Reads served from
// a cache would not be there. Each point is its rounds' median.
func TestMeasureDiskReadsFromTheDevice(t *testing.T) {
	t.Setenv(rundir.DiskProfilesEnv, filepath.Join(t.TempDir(), "disks"))
	p := diskFile(t, MinDiskFile, false)
	if resident, _, err := pagecache.Evict(p); err != nil || resident > 0 {
		t.Fatalf("evicting the file: %d pages stayed (%v)", resident, err)
	}
	bd, err := blockdev.OfFile(p)
	if err != nil {
		t.Fatal(err)
	}
	disk := blockdev.DiskName(bd)
	sectors := func() uint64 {
		st, err := blockdev.DiskStats(disk)
		if err != nil || len(st) != 1 {
			t.Fatalf("diskstats of %s: %v %v", disk, st, err)
		}
		return st[0].SectorsRead
	}
	o := DiskOptions{Depths: []int{1, 4}, Blocks: []int64{128 << 10, 1 << 20}, PerPoint: 100 * time.Millisecond, Rounds: 3,
		Cost: CostOptions{Region: 32 << 20, Limit: 16 << 20, Passes: 1, Pairs: 1}}
	before := sectors()
	d, kept, err := MeasureDisk(p, o)
	read := (sectors() - before) * 512
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Points) != len(o.Depths)*len(o.Blocks) {
		t.Fatalf("%d points, want %d", len(d.Points), len(o.Depths)*len(o.Blocks))
	}
	var least float64
	for _, pt := range d.Points {
		if pt.BytesPerSec <= 0 || pt.MeanLatencyNs <= 0 {
			t.Errorf("point %+v: no bandwidth or latency", pt)
		}
		if len(pt.RoundsBytesPerSec) != o.Rounds {
			t.Errorf("point %+v: want its %d rounds' bandwidths", pt, o.Rounds)
		}
		rs := slices.Clone(pt.RoundsBytesPerSec)
		slices.Sort(rs)
		for _, bw := range rs {
			least += bw * o.PerPoint.Seconds()
		}
		if len(rs) > 0 && pt.BytesPerSec != rs[len(rs)/2] {
			t.Errorf("point %+v: its bandwidth is not its rounds' median", pt)
		}
		t.Logf("depth %d, %d KiB: %.0f MB/s, %.0f µs", pt.Depth, pt.BlockBytes>>10, pt.BytesPerSec/1e6, pt.MeanLatencyNs/1e3)
	}
	if float64(read) < least {
		t.Errorf("the disk read %d bytes while the profile says at least %.0f were", read, least)
	}
	if pc := d.PrefetchCost; pc == nil || len(pc.AskedBytes) != 1 || len(pc.AskCPUNS) != 1 || pc.ComputeNSPerByte < 0 || pc.AskNSPerByte <= 0 {
		t.Errorf("prefetch cost %+v: want one pair measured, with the asking thread's pace", pc)
	}
	if !strings.HasSuffix(d.Device, " "+disk) {
		t.Errorf("device %q, want the disk %s", d.Device, disk)
	}
	back, err := rundir.ReadDiskProfile(bd.DiskDev)
	if err != nil || back == nil || len(back.Points) != len(d.Points) || !reflect.DeepEqual(back.Points, d.Points) || kept != rundir.DiskProfilePath(bd.DiskDev) ||
		back.PrefetchCost == nil || back.PrefetchCost.ComputeNSPerByte != d.PrefetchCost.ComputeNSPerByte || back.PrefetchCost.AskNSPerByte != d.PrefetchCost.AskNSPerByte {
		t.Errorf("kept %s: read back %+v (%v), want %+v", kept, back, err, d)
	}
}

// A profile whose prefetch cost cannot be measured (here: a region larger
// than the file) keeps its reads, and says why it has no cost.
func TestMeasureDiskKeepsTheReadsWhereThePrefetchCostCannotBeMeasured(t *testing.T) {
	t.Setenv(rundir.DiskProfilesEnv, filepath.Join(t.TempDir(), "disks"))
	p := diskFile(t, MinDiskFile, false)
	if _, _, err := pagecache.Evict(p); err != nil {
		t.Fatal(err)
	}
	o := DiskOptions{Depths: []int{1}, Blocks: []int64{1 << 20}, PerPoint: 50 * time.Millisecond, Cost: CostOptions{Region: 2 * MinDiskFile}}
	d, kept, err := MeasureDisk(p, o)
	if err != nil {
		t.Fatal(err)
	}
	if pc, why := d.Prefetch(); len(d.Points) != 1 || pc != nil || !strings.Contains(why, "smaller than") {
		t.Fatalf("%d points, cost %+v, why none %q: want the point kept and why the cost is not", len(d.Points), pc, why)
	}
	bd, err := blockdev.OfFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if back, err := rundir.ReadDiskProfile(bd.DiskDev); err != nil || back == nil || back.PrefetchCostNA != d.PrefetchCostNA || kept == "" {
		t.Errorf("kept %s: %+v (%v), want it with why it has no cost", kept, back, err)
	}
}

// A point measured in rounds is the round of the median bandwidth (the
// upper of an even count), its latency that round's, and it keeps every
// round's bandwidth in the order measured.
func TestAPointIsItsRoundsMedian(t *testing.T) {
	round := func(bw, lat float64) rundir.DiskPoint {
		return rundir.DiskPoint{Depth: 4, BlockBytes: 1 << 20, BytesPerSec: bw, MeanLatencyNs: lat}
	}
	for _, tc := range []struct {
		name   string
		rounds []rundir.DiskPoint
		bw     float64
		lat    float64
	}{
		{"one round: itself", []rundir.DiskPoint{round(5, 50)}, 5, 50},
		{"three rounds: the middle bandwidth's", []rundir.DiskPoint{round(3, 30), round(1, 10), round(2, 20)}, 2, 20},
		{"two rounds: the upper", []rundir.DiskPoint{round(1, 10), round(4, 40)}, 4, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := medianPoint(tc.rounds)
			var order []float64
			for _, r := range tc.rounds {
				order = append(order, r.BytesPerSec)
			}
			if p.BytesPerSec != tc.bw || p.MeanLatencyNs != tc.lat || !slices.Equal(p.RoundsBytesPerSec, order) || p.Depth != 4 {
				t.Errorf("%+v, want %v B/s at %v ns with the rounds %v", p, tc.bw, tc.lat, order)
			}
		})
	}
}
