package predict

import (
	"math"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

// scatterRun is a decode that reads one page in every 64 of a 4096-page
// file, four calls, on a disk of kb read_ahead_kb (nil: not recorded),
// whose decode waited on bound, measured as the kernel model reads it
// under budget: each fault's read-around is mostly pages no call reads.
func scatterRun(budget int64, kb *uint64, bound string) *Run {
	const pages, calls = 4096, 4
	r := cyclicRun(pages, calls)
	for i := range r.calls {
		r.calls[i].reads = nil
		for p := int32(0); p < pages; p += 64 {
			r.calls[i].reads = append(r.calls[i].reads, pageRange{p, p + 1})
		}
	}
	r.Budget = budget
	// A disk that serves a 128 KiB request at depth 1 in 0.1 ms, the
	// run's requests 128 KiB.
	r.device(nil, 1<<20, 8, &rundir.DiskProfile{Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 128 << 10 / 1e-4}}})
	r.Model.Block.Name = "vda1"
	r.Model.Block.ReadAheadKB = kb
	r.bounds = map[uint8]phaseBound{event.PhaseDecode: {bound: bound, busyShare: 0.8}}
	m := r.byPhase[event.PhaseDecode]
	ra := int32(64)
	if kb != nil {
		ra = int32(2 * int64(*kb) << 10 / pageSize)
	}
	got, _ := r.simulate(r.capacityPages(budget, 0), ra, nil, false)
	m.bytes, m.majors = got[event.PhaseDecode][0], got[event.PhaseDecode][1]
	// A ns of wait a byte read (about a ms a MB), and 10 ms of compute
	// a call.
	m.waitNS = m.bytes
	m.wallNS = m.waitNS + calls*10e6
	return r
}

func kbOf(v uint64) *uint64 { return &v }

// Where a token's bytes are mostly the faults' read-around, a plan
// advises the read_ahead_kb whose window the model predicts the most
// tokens/s at, with the command that sets it on the model's disk, what
// the decode waited on notwithstanding (the faults a smaller window adds
// are timed by the disk's profile); where the run carries no disk profile
// (those faults could not be timed), where the disk's read-ahead was not
// recorded, or where no window pays 1.25×, none, saying why.
func TestPlanAdvisesTheReadAheadWhoseReadAroundPays(t *testing.T) {
	for _, tc := range []struct {
		name    string
		budget  int64
		kb      *uint64
		bound   string
		wantKB  uint64
		command string
		says    string
	}{
		{"the read-around is the bytes: the smallest window", 512 * pageSize, kbOf(8192), rundir.BoundBandwidth, 32, "blockdev --setra 64 /dev/vda1", "predicted to give"},
		{"compute-bound: the bytes still time the stall", 512 * pageSize, kbOf(8192), rundir.BoundCompute, 32, "blockdev --setra 64 /dev/vda1", "predicted to give"},
		{"latency-bound: the profile times the added faults", 512 * pageSize, kbOf(8192), rundir.BoundLatency, 32, "blockdev --setra 64 /dev/vda1", "predicted to give"},
		{"no disk profile", 512 * pageSize, kbOf(8192), "", 0, "", "no disk profile"},
		{"the disk's read-ahead not recorded", 512 * pageSize, nil, rundir.BoundBandwidth, 0, "", "did not record its disk's read_ahead_kb"},
		{"the model fits: no window reads less", 8192 * pageSize, kbOf(8192), rundir.BoundBandwidth, 0, "", "no read_ahead_kb of"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := scatterRun(tc.budget, tc.kb, tc.bound)
			if tc.bound == "" {
				r.bounds[event.PhaseDecode] = phaseBound{why: "no disk profile: run iocorr doctor --disk FILE"}
				r.device(nil, 1<<20, 8, nil)
			}
			a := r.adviseReadahead(tc.budget, []string{"cmd"})
			if a.KB != tc.wantKB || a.Command != tc.command || !strings.Contains(a.Reason, tc.says) {
				t.Fatalf("advice %d KiB, %q (%s); want %d KiB, %q, saying %q", a.KB, a.Command, a.Reason, tc.wantKB, tc.command, tc.says)
			}
			if tc.wantKB == 0 {
				if a.Speedup != nil || a.BytesRatio != nil || a.Prefetch != nil {
					t.Errorf("no advice, yet a speedup %v, bytes %v, prefetch %+v", a.Speedup, a.BytesRatio, a.Prefetch)
				}
				return
			}
			if a.Speedup == nil || *a.Speedup < minReadaheadSpeedup || a.BytesRatio == nil || *a.BytesRatio >= 1 {
				t.Errorf("advises %d KiB at speedup %v, bytes %v: want ≥ %.2f× at fewer bytes", a.KB, a.Speedup, a.BytesRatio, minReadaheadSpeedup)
			}
			if a.Prefetch == nil || a.Prefetch.Reason == "" {
				t.Errorf("advises %d KiB without saying whether a prefetcher pays at it: %+v", a.KB, a.Prefetch)
			}
			if a.CurrentKB != *tc.kb {
				t.Errorf("current read_ahead_kb %d, want %d", a.CurrentKB, *tc.kb)
			}
		})
	}
}

// With a window other than the run's own, each read pays at least the
// disk's latency at depth 1, as its profile measured it: on a disk that
// takes 20 ms a read, every smaller window's added reads cost the
// scattered decode more than the bytes they save, and no read-ahead is
// advised; on one that takes 0.1 ms the bytes' stall stands, and the
// smallest window reads least.
func TestAReadPaysTheDisksLatencyAtDepthOne(t *testing.T) {
	slow := &rundir.DiskProfile{Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 128 << 10 / 0.02}}}
	fast := &rundir.DiskProfile{Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 128 << 10 / 1e-4}}}
	for _, tc := range []struct {
		name    string
		profile *rundir.DiskProfile
		wantKB  uint64
	}{
		{"0.1 ms a request: the bytes' stall", fast, 32},
		{"20 ms a request", slow, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := scatterRun(512*pageSize, kbOf(8192), rundir.BoundBandwidth)
			r.device(nil, 1<<20, 8, tc.profile) // 128 KiB requests
			if a := r.adviseReadahead(512*pageSize, []string{"cmd"}); a.KB != tc.wantKB {
				t.Errorf("advises %d KiB (%s), want %d", a.KB, a.Reason, tc.wantKB)
			}
		})
	}
}

// predict's kernel rows at a window other than the run's own hold the
// same floor: each device read the faults made (a window, sync or
// async) pays at least the disk's latency at depth 1, here 20 ms (the
// profile's one size, whole); at the run's own window the run's wait per
// byte stands, as it measured it.
func TestAnotherWindowsReadsPayTheDisksLatencyEach(t *testing.T) {
	slow := &rundir.DiskProfile{Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 128 << 10 / 0.02}}}
	const budget = 512 * pageSize
	for _, tc := range []struct {
		name   string
		window int32 // pages
		floor  bool
	}{
		{"the run's own window", 2 * 8192 << 10 / pageSize, false},
		{"a 64 KiB window", 64 << 10 / pageSize, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := scatterRun(budget, kbOf(8192), rundir.BoundBandwidth)
			r.device(nil, 1<<20, 8, slow)
			row := r.predictRows(budget, PolicyKernel, ModeOne, tc.window, nil, 0, nil, false, "")[1]
			bytesStall := row.BytesReadPerToken * r.byPhase[event.PhaseDecode].waitPerByte()
			floor := row.readsPerToken * 20e6
			switch {
			case row.readsPerToken < row.MajorFaultsPerToken:
				t.Errorf("%.1f reads a token, under its %.1f major faults", row.readsPerToken, row.MajorFaultsPerToken)
			case tc.floor && (math.Abs(row.StallNSPerToken-floor) > 1 || floor <= bytesStall):
				t.Errorf("stall %.0f ns a token, want the reads' %.0f (above the bytes' %.0f)", row.StallNSPerToken, floor, bytesStall)
			case !tc.floor && row.StallNSPerToken != bytesStall:
				t.Errorf("stall %.0f ns a token, want the bytes' %.0f", row.StallNSPerToken, bytesStall)
			}
		})
	}
}

// A prefetcher at a window other than the run's own is judged by the
// stricter rule (it pays only by the bytes it does not read), unless the
// run was latency-bound and the window is smaller, which keeps a decode
// latency-bound: elsewhere what the decode would wait on is not known.
func TestAPrefetcherAtAnotherWindowIsJudgedByTheBytesItSavesUnlessStillLatencyBound(t *testing.T) {
	for _, tc := range []struct {
		name      string
		verdict   string
		window    int64 // bytes; 0 the run's own (64 pages)
		bandwidth bool  // judged bandwidth-bound
	}{
		{"latency-bound, its own window", rundir.BoundLatency, 0, false},
		{"latency-bound, a smaller window", rundir.BoundLatency, 32 * pageSize, false},
		{"latency-bound, a larger window", rundir.BoundLatency, 128 * pageSize, true},
		{"bandwidth-bound, a smaller window", rundir.BoundBandwidth, 32 * pageSize, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := pickedRun()
			r.Model.Block.ReadAheadKB = kbOf(128) // a 64-page read-around
			got, _ := r.simulate(400, 64, nil, false)
			m := r.byPhase[event.PhaseDecode]
			m.bytes, m.majors = got[event.PhaseDecode][0], got[event.PhaseDecode][1]
			m.waitNS, m.wallNS = 4*m.bytes, 4*m.bytes+4e6
			r.device([]span{{0, 1e9}}, 1<<30, 8192, &rundir.DiskProfile{Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 1e9}, {Depth: 32, BlockBytes: 128 << 10, BytesPerSec: 4e9}}})
			r.bounds = map[uint8]phaseBound{event.PhaseDecode: {bound: tc.verdict, busyShare: 0.3}}
			a := r.advise(400*pageSize, tc.window, []string{"cmd"})
			if strings.Contains(a.Reason, "bandwidth-bound") != tc.bandwidth {
				t.Errorf("%q: want it judged bandwidth-bound %v", a.Reason, tc.bandwidth)
			}
		})
	}
}
