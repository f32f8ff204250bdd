package doctor

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/internal/pagecache"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The probe's compute goes over every word of the region on every pass,
// alone and beside the thread that asks ahead of it, which asks for every
// byte of every pass: the sum it returns is the file's, read by pread
// (the oracle), times the passes.
func TestTheCostProbeComputesOverEveryByteOfTheRegionEachPass(t *testing.T) {
	const region, passes = 8 << 20, 3
	p := diskFile(t, region+4096, false)
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var want uint64
	for off := 0; off < region; off += 8 {
		want += binary.NativeEndian.Uint64(raw[off:])
	}
	want *= passes
	for _, c := range []struct {
		mode  string
		asked int64
	}{{"alone", 0}, {"beside", region * passes}} {
		t.Run(c.mode, func(t *testing.T) {
			if _, _, err := pagecache.Evict(p); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			if err := costProbe(strings.NewReader(fmt.Sprintf("%d %d %s %s\n", region, passes, c.mode, p)), &out); err != nil {
				t.Fatal(err)
			}
			var r costRun
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("%q: %v", out.String(), err)
			}
			if r.Sum != want || r.Asked != c.asked || r.WallNS <= 0 || r.UserNS < 0 || r.SysNS < 0 {
				t.Errorf("%+v: want the sum %d, %d bytes asked, times not negative", r, want, c.asked)
			}
		})
	}
}

// The prefetch cost is the median of its pairs' added user time per byte
// asked, each pair of a cold region larger than the cgroup: every figure
// it keeps adds up to it.
func TestThePrefetchCostIsTheMedianOfThePairsAddedUserTimePerByte(t *testing.T) {
	testenv.RequireRoot(t)
	o := CostOptions{Region: 64 << 20, Limit: 32 << 20, Passes: 1, Pairs: 3}
	p := diskFile(t, o.Region, false)
	pc, err := MeasurePrefetchCost(p, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", pc)
	if len(pc.AloneUserNS) != o.Pairs || len(pc.BesideUserNS) != o.Pairs || len(pc.AskedBytes) != o.Pairs || len(pc.AskCPUNS) != o.Pairs ||
		pc.RegionBytes != o.Region || pc.LimitBytes != o.Limit || pc.Passes != o.Passes {
		t.Fatalf("%+v: want %d pairs of the options' region, limit and passes", pc, o.Pairs)
	}
	var per, pace []float64
	for i := range o.Pairs {
		if pc.AskedBytes[i] != o.Region*int64(o.Passes) {
			t.Errorf("pair %d asked %d bytes, want the region each pass, %d", i, pc.AskedBytes[i], o.Region*int64(o.Passes))
		}
		// Bringing 64 MiB in through a cgroup of 32 takes the asking
		// thread's CPU: a pace of 0 is a thread not timed.
		if pc.AskCPUNS[i] <= 0 {
			t.Errorf("pair %d: the asking thread's CPU %d ns, want its time in its calls", i, pc.AskCPUNS[i])
		}
		per = append(per, float64(pc.BesideUserNS[i]-pc.AloneUserNS[i])/float64(pc.AskedBytes[i]))
		pace = append(pace, float64(pc.AskCPUNS[i])/float64(pc.AskedBytes[i]))
	}
	slices.Sort(per)
	slices.Sort(pace)
	if want := max(per[1], 0); pc.ComputeNSPerByte != want {
		t.Errorf("compute ns a byte %v, want the pairs' median %v", pc.ComputeNSPerByte, want)
	}
	if pc.AskNSPerByte != pace[1] {
		t.Errorf("the helper's pace %v ns a byte, want the pairs' median %v", pc.AskNSPerByte, pace[1])
	}
}
