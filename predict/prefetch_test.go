package predict

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

// Pages that async read-ahead brings in sit in large folios, whose young
// PTEs count more than one at their first scan (mm/vmscan.c
// folio_check_references: referenced_ptes > 1 activates), where an
// order-0 page of a fault's read-around is kept once and activated only
// when young again. The active list the large folios make lets refaults
// pass the distance test: so a run at 256 MiB keeps part of the demo
// MoE's 326 MiB between tokens (measured 70–129 MiB a decode token read;
// the model read the whole file, 325, before).
func TestALargeFolioYoungAtItsFirstScanIsActivated(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flags uint8
		want  uint8 // the list the page is on after one scan
	}{
		{"order 0, young: kept once on the inactive list", flagYoung, listInactive},
		{"large, young: activated", flagYoung | flagLarge, listActive},
		{"large, old: evicted", flagLarge, listNone},
		{"order 0, young again after its first scan: activated", flagYoung | flagRef, listActive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newPageCache(4, 3, 1, nil)
			for p := range int32(3) {
				c.add(p)
			}
			c.flags[0] = tc.flags
			// Pages 1 and 2 are old: the next scanned goes.
			c.capacity = 2 // one page must go: the scan starts at page 0, the tail
			c.reclaim()
			if c.where[0] != tc.want {
				t.Errorf("page 0 on list %d, want %d", c.where[0], tc.want)
			}
		})
	}
}

func TestARequestsStallIsTheServiceTimeLeftAfterEachReadsLead(t *testing.T) {
	const rate = 1e9 // a byte a nanosecond
	for _, tc := range []struct {
		name        string
		bytes, lead []float64
		want        float64
	}{
		{"nothing read, nothing waited", []float64{0, 0}, []float64{0, 0}, 0},
		{"needed at once: the whole service time", []float64{100, 50}, []float64{0, 0}, 150},
		{"enough lead for every read", []float64{100, 50}, []float64{100, 150}, 0},
		{"the first late, the second in time after it", []float64{100, 50}, []float64{40, 120}, 60},
		{"a wait delays what follows it", []float64{100, 100}, []float64{0, 10}, 190},
		{"a lead shorter than an earlier one counts as that one", []float64{10, 10}, []float64{30, 5}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := arrivals{rate: rate}
			for i, b := range tc.bytes {
				a.add(b, tc.lead[i])
			}
			if got := a.stall; math.Abs(got-tc.want) > 1e-9 {
				t.Errorf("stall %v ns, want %v", got, tc.want)
			}
		})
	}
}

// twoLayerCall is a call of a token embedding's row, two blocks (dense a,
// then experts 1 and 3 of gate, up and down) and an output head.
func twoLayerCall() *call {
	c := &call{}
	add := func(tensor uint32, expert, layer int16) {
		c.of = append(c.of, readOf{tensor: tensor, expert: expert, layer: layer})
		p := int32(len(c.reads)) * 10
		c.reads = append(c.reads, pageRange{p, p + 10})
	}
	add(98, -1, -1)
	for l := range int16(2) {
		add(uint32(10*l), -1, l)
		for k := range uint32(3) {
			add(uint32(10*l)+1+k, 1, l)
			add(uint32(10*l)+1+k, 3, l)
		}
	}
	add(99, -1, -1)
	return c
}

// The next layer alone is asked for at a layer's start; with the picks
// (iocorr prefetch --layers), at the pick, after the picked slices.
func TestAPrefetchRequestsThePicksAtThePickAndTheNextLayerAtALayersStartOrAfterThePicks(t *testing.T) {
	type want struct {
		at      int
		reads   []int
		experts bool
	}
	for _, tc := range []struct {
		pol  string
		want []want
	}{
		{PolicyPrefetchExperts, []want{{2, []int{2, 3, 4, 5, 6, 7}, true}, {9, []int{9, 10, 11, 12, 13, 14}, true}}},
		// The last layer's next is the head, not the embedding's row the
		// call read first.
		{PolicyPrefetchLayers, []want{{1, []int{8}, false}, {8, []int{15}, false}}},
		{PolicyPrefetchBoth, []want{{2, []int{2, 3, 4, 5, 6, 7}, true}, {2, []int{8}, false}, {9, []int{9, 10, 11, 12, 13, 14}, true}, {9, []int{15}, false}}},
	} {
		t.Run(tc.pol, func(t *testing.T) {
			gs := groups(twoLayerCall(), tc.pol)
			if len(gs) != len(tc.want) {
				t.Fatalf("%d requests, want %d: %+v", len(gs), len(tc.want), gs)
			}
			for i, g := range gs {
				w := tc.want[i]
				if g.at != w.at || !slices.Equal(g.reads, w.reads) || g.experts != w.experts {
					t.Errorf("request %d: at %d reads %v experts %v, want at %d reads %v experts %v", i, g.at, g.reads, g.experts, w.at, w.reads, w.experts)
				}
			}
		})
	}
}

// A prefetched range is read exactly (no read-around), and the graph's
// later touches of it are no major fault.
func TestAPrefetchedRangeIsReadExactlyAndNeverFaultedOn(t *testing.T) {
	c := newPageCache(1000, 500, 64, nil)
	if n := c.prefetch(pageRange{100, 150}); n != 50 {
		t.Errorf("the request read %d pages, want 50", n)
	}
	if n := c.prefetch(pageRange{120, 160}); n != 10 {
		t.Errorf("a request over 30 resident pages read %d, want 10", n)
	}
	c.access(pageRange{100, 160})
	if c.majors != 0 || c.readPages != 60 {
		t.Errorf("touching the prefetched pages: %d major faults, %d pages read; want 0 and 60", c.majors, c.readPages)
	}
}

// With experts requested at the pick, a call reads fewer bytes than the
// kernel's read-arounds: only the first picked slice, which the graph
// reads before the pick reaches the helper, is faulted in with its
// read-around.
func TestPrefetchingThePicksReadsFewerBytesThanTheKernelsReadAround(t *testing.T) {
	r := pickedRun()
	kernel, _ := r.simulate(400, 64, nil, false)
	pf := r.simulatePrefetch(400, 64, nil, PolicyPrefetchExperts, nil, false)
	k, p := kernel[event.PhaseDecode][0], pf.counts[event.PhaseDecode][0]
	if p >= k {
		t.Errorf("prefetching read %d bytes, the kernel %d; want fewer", p, k)
	}
	// The graph reaches the first picked slice before the pick reaches
	// the helper: each call's first is left to its fault, whose window
	// reads 64 pages around its first page; the helper asks for the rest
	// of it (99 pages, the window's resident), then the second slice.
	if pf.raced != 4 {
		t.Errorf("%d slices left to their faults, want each call's first", pf.raced)
	}
	if pf.window != 199*pageSize {
		t.Errorf("the largest request %d bytes, want the first slice's rest and the second slice's %d", pf.window, 199*pageSize)
	}
	if pf.unmeasured != 8 {
		t.Errorf("%d reads without a lead time, want 8 (no trace)", pf.unmeasured)
	}
}

func TestARunWithRacingReadersIsPredictedInBothModes(t *testing.T) {
	for _, tc := range []struct {
		readers int
		want    []string
	}{
		{0, []string{ModeOne}},
		{1, []string{ModeOne}},
		{2, []string{ModeOne, ModeRace}},
	} {
		if got := (&Run{readers: tc.readers}).modes(); !slices.Equal(got, tc.want) {
			t.Errorf("%d readers: modes %v, want %v", tc.readers, got, tc.want)
		}
	}
}

// A prefetched run has two readers of the model, the graph's faults and
// the helper's asks, whatever the run had: its rows are predicted in both
// readers' modes, and the note says why; the kernel's rows stay in the
// run's own.
func TestAPrefetchedRunIsPredictedInBothReadersModes(t *testing.T) {
	r := pickedRun()
	r.Budget = 300 * pageSize
	res, err := Predict(r, Options{Budgets: []int64{r.Budget}, Prefetch: []string{PolicyPrefetchExperts}})
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string][]string{}
	for _, row := range res.Rows {
		if row.Phase == "decode" && (row.Policy == PolicyKernel || row.Policy == PolicyPrefetchExperts) {
			modes[row.Policy] = append(modes[row.Policy], row.Mode)
		}
	}
	if want := []string{ModeOne}; !slices.Equal(modes[PolicyKernel], want) {
		t.Errorf("kernel rows in modes %v, want %v (the run's one reader)", modes[PolicyKernel], want)
	}
	if want := []string{ModeOne, ModeRace}; !slices.Equal(modes[PolicyPrefetchExperts], want) || !slices.Equal(res.Modes, want) {
		t.Errorf("prefetch rows in modes %v, the result's %v; want %v", modes[PolicyPrefetchExperts], res.Modes, want)
	}
	if !strings.Contains(res.ModesNote, "helper") || res.RunMode != "" {
		t.Errorf("modes note %q, run mode %q: want the helper's reason, no run mode of one reader", res.ModesNote, res.RunMode)
	}
}

// A prefetch row needs the picks (the experts' requests are the picks)
// and the stream they make: where they are NA, every figure of every
// prefetch row is NA with that reason.
func TestPrefetchRowsAreNAWhereThePicksAre(t *testing.T) {
	r := cyclicRun(100, 2)
	r.Budget = 1 << 20
	r.picksNA = "1 of 2 calls lack the router's picks of some MoE layer"
	res, err := Predict(r, Options{Budgets: []int64{1 << 20}, Prefetch: []string{PolicyPrefetchExperts, PolicyPrefetchLayers, PolicyPrefetchBoth}})
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, row := range res.Rows {
		if row.Policy == PolicyRun || row.Policy == PolicyKernel || row.Policy == PolicyBelady {
			continue
		}
		seen++
		for _, c := range Figures {
			if row.NA[c] != r.picksNA {
				t.Errorf("%s %s: %s NA %q, want the picks' reason", row.Policy, row.Phase, c, row.NA[c])
			}
		}
	}
	if seen != 3*2*2 {
		t.Errorf("%d prefetch rows, want 12 (three policies, two phases, two readers' modes)", seen)
	}
}

// plan judges a prefetch by what the decode calls waited on, stats'
// verdict of the phase (rundir.IOBound): none where a deciding figure was
// not measured (without a disk profile latency is not told from
// bandwidth); and it says which.
func TestPlanJudgesAPrefetchByWhatTheDecodeWaitedOn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		bounds map[uint8]phaseBound
		says   string
	}{
		{"not known without a disk profile", map[uint8]phaseBound{event.PhaseDecode: {bound: "", busyShare: 0.4, why: "no disk profile: run iocorr doctor --disk FILE"}}, "not known (no disk profile"},
		{"no I/O shape of the decode", map[uint8]phaseBound{event.PhasePrefill: {bound: rundir.BoundLatency, busyShare: 0.4}}, "decode has no I/O shape"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cyclicRun(100, 2)
			r.bounds = tc.bounds
			a := r.advise(1<<20, 0, []string{"cmd"})
			if a.Policy != "" || a.Command != "" || !strings.Contains(a.Reason, tc.says) {
				t.Errorf("advice %+v, want none, saying %q", a, tc.says)
			}
		})
	}
}

// A prefetch pays where it is predicted to give 1.1× the kernel policy's
// tokens/s at no more than 1.05× its bytes. On a bandwidth-bound decode
// it can pay only by reading fewer bytes: at most 0.8× the kernel's, and
// its tokens/s are credited no more than the bytes it saves. So on a
// compute-bound one: little of its stall is wait, and the kernel's work in
// the faults shrinks only with the bytes.
func TestAPrefetchPaysOnABandwidthOrComputeBoundDecodeOnlyByTheBytesItDoesNotRead(t *testing.T) {
	for _, tc := range []struct {
		name         string
		bound        string
		speed, bytes float64
		wantSpeed    float64
		pays         bool
	}{
		{"latency-bound, faster at the same bytes", rundir.BoundLatency, 1.5, 1.0, 1.5, true},
		{"latency-bound, too little faster", rundir.BoundLatency, 1.05, 0.9, 1.05, false},
		{"latency-bound, more bytes", rundir.BoundLatency, 1.5, 1.1, 1.5, false},
		{"bandwidth-bound, half the bytes: credited their saving", rundir.BoundBandwidth, 2.67, 0.5, 2, true},
		{"bandwidth-bound, faster at 0.9× the bytes (an earlier VM's 128 KiB read-ahead)", rundir.BoundBandwidth, 1.1, 0.9, 1.1, false},
		{"bandwidth-bound, more in flight at the same bytes", rundir.BoundBandwidth, 1.4, 1.0, 1.0, false},
		{"compute-bound, half the bytes: credited their saving", rundir.BoundCompute, 1.8, 0.5, 1.8, true},
		{"compute-bound, more in flight at the same bytes (the 128 KiB read-ahead case)", rundir.BoundCompute, 1.07, 1.02, 1 / 1.02, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			speed, why := judge(tc.bound, tc.speed, tc.bytes)
			if math.Abs(speed-tc.wantSpeed) > 1e-9 || (why == "") != tc.pays {
				t.Errorf("judge = %v, %q; want speed %v, pays %v", speed, why, tc.wantSpeed, tc.pays)
			}
		})
	}
}

// A request's lead times are the trace's: from the request's moment (the
// layer's first expert fault for the picks) to each slice's first fault
// in the same call, less the faults waited on between, the median over
// decode calls.
func TestLeadTimesAreTheComputeFromTheRequestToEachSlicesFirstFault(t *testing.T) {
	r := &Run{byPhase: map[uint8]*measured{event.PhaseDecode: {calls: 2}}}
	for tok := range uint32(2) {
		c := call{phase: event.PhaseDecode, token: tok}
		for tensor := uint32(1); tensor <= 2; tensor++ {
			c.reads = append(c.reads, pageRange{int32(tensor) * 10, int32(tensor)*10 + 10})
			c.of = append(c.of, readOf{tensor: tensor, expert: 3, layer: 0})
		}
		r.calls = append(r.calls, c)
	}
	r.firstFault = map[faultKey]uint64{
		{0, 1, 3}: 1000, {0, 2, 3}: 3000, // call 0: up 2000 ns after gate, 500 of them waiting
		{1, 1, 3}: 10000, {1, 2, 3}: 11000, // call 1: 1000 after, no wait
	}
	r.stalls = map[uint32][]span{0: {{1500, 2000}}}
	leads := r.leads(PolicyPrefetchExperts)
	for _, tc := range []struct {
		tensor uint32
		want   float64
	}{
		{1, 0},    // the gate's first fault is the request's moment
		{2, 1500}, // the median (the upper of two) of 1500 and 1000
	} {
		if got, ok := leads[leadKey{tc.tensor, true}]; !ok || got != tc.want {
			t.Errorf("tensor %d: lead %v (measured %v), want %v", tc.tensor, got, ok, tc.want)
		}
	}
}

// A request is timed at the disk's profiled bandwidth at the depth its
// reads keep (its bytes over the run's mean request, at most 32) where
// the run carries a profile, else at the run's own rate, and says which.
func TestARequestIsTimedAtTheDepthItKeepsOrTheRunsOwnRate(t *testing.T) {
	profile := &rundir.DiskProfile{Points: []rundir.DiskPoint{
		{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 100e6},
		{Depth: 32, BlockBytes: 128 << 10, BytesPerSec: 900e6},
	}}
	busy := []span{{0, 1e9}} // 200 MiB over one busy second
	for _, tc := range []struct {
		name    string
		busy    []span
		profile *rundir.DiskProfile
		asked   int64
		want    float64
		note    string
		ok      bool
	}{
		{"one request's worth: depth 1", busy, profile, 128 << 10, 100e6, ProfileNote, true},
		{"32 requests' worth and more: depth 32", busy, profile, 64 << 20, 900e6, ProfileNote, true},
		{"no profile: the run's own rate", busy, nil, 64 << 20, 200 << 20, DeviceNote, true},
		{"neither", nil, nil, 64 << 20, 0, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{}
			r.device(tc.busy, 200<<20, 1600, tc.profile) // 200 MiB in 128 KiB requests
			got, note, ok := r.dev.rate(tc.asked)
			if ok != tc.ok || math.Abs(got-tc.want) > 1 || note != tc.note {
				t.Errorf("rate %v (%q, %v), want %v (%q, %v)", got, note, ok, tc.want, tc.note, tc.ok)
			}
		})
	}
}

// A prefetch row of a bandwidth-bound phase stalls at least its bytes at
// the run's stall per byte, and says so: the device serves the
// prefetch's reads no faster than the faults' (timed apart, the bench's
// bandwidth-bound rows were 1.15–1.8× optimistic). Any other phase's row
// stalls at least its bytes at the disk profile's best rate, and says so
// where that binds; without a profile it keeps the model's stall.
func TestAPrefetchRowStallsItsBytesAtLeastAtTheRateTheDeviceCanServe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound string
		best  float64 // the profile's best bytes a second, 0: no profile
		note  string
		stall float64 // ns a token
	}{
		// 1 MiB a token at 100 ns per 2 MiB.
		{"bandwidth-bound", rundir.BoundBandwidth, 0, BandwidthBoundNote, 50},
		{"bandwidth-bound, whatever the profile's best", rundir.BoundBandwidth, 1 << 30, BandwidthBoundNote, 50},
		// 1 MiB at 1 GiB/s.
		{"latency-bound, at the profile's best", rundir.BoundLatency, 1 << 30, "no faster than the disk profile's best (1074 MB/s", 1e9 / 1024},
		{"latency-bound without a profile", rundir.BoundLatency, 0, "", 0},
		{"undecided", "", 0, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cyclicRun(100, 2)
			r.Budget = 1 << 20
			r.calls[0].start, r.calls[0].end = 100, 200
			r.calls[1].start, r.calls[1].end = 200, 300
			m := r.byPhase[event.PhaseDecode]
			m.wallNS, m.waitNS, m.bytes = 200, 100, 2<<20
			r.device([]span{{100, 190}, {200, 290}}, 2<<20, 2, nil)
			r.bounds = map[uint8]phaseBound{event.PhaseDecode: {bound: tc.bound, bestBytesPerS: tc.best}}
			got := prefetched{counts: newCounts(), demandBytes: map[uint8]uint64{}, stallNS: map[uint8]float64{}, notes: map[string]bool{DeviceNote: true}}
			got.counts[event.PhaseDecode][0] = 2 << 20
			row := r.prefetchRow(r.Budget, PolicyPrefetchExperts, event.PhaseDecode, got, "")
			switch {
			case tc.note == "" && (strings.Contains(row.Note, BandwidthBoundNote) || strings.Contains(row.Note, "the disk profile's best")):
				t.Errorf("note %q: want no floor's note", row.Note)
			case !strings.Contains(row.Note, tc.note):
				t.Errorf("note %q: want %q", row.Note, tc.note)
			}
			if math.Abs(row.StallNSPerToken-tc.stall) > 1e-9 {
				t.Errorf("stall %v ns a token, want %v", row.StallNSPerToken, tc.stall)
			}
		})
	}
}

// The fault wait a phase spent with the disk idle is the stalls' time
// that no block request covers.
func TestTheIdleWaitIsTheStallNoRequestCovers(t *testing.T) {
	for _, tc := range []struct {
		name         string
		stalls, busy []span
		want         uint64
	}{
		{"no requests: all of it", []span{{0, 10}, {20, 30}}, nil, 20},
		{"a request under all of it: none", []span{{10, 20}}, []span{{0, 100}}, 0},
		{"requests under parts", []span{{0, 10}, {20, 40}}, []span{{5, 8}, {9, 25}, {35, 50}}, (10 - 3 - 1) + (20 - 5 - 5)},
		{"requests only before and after", []span{{10, 20}}, []span{{0, 10}, {20, 30}}, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := idleWait(tc.stalls, tc.busy); got != tc.want {
				t.Errorf("idle wait %d, want %d", got, tc.want)
			}
		})
	}
}

// The pages a prefetch reads still cost the command the kernel's work of
// bringing them in: its row is charged, for every byte it fetched, the
// fault wait per byte the run spent with the disk idle, on top of its
// requests' and its demand reads' stall.
func TestAPrefetchedByteCostsTheRunsIdleWaitPerByte(t *testing.T) {
	for _, tc := range []struct {
		name    string
		idle    uint64 // ns of the run's 100 ns of wait
		fetched uint64
		want    float64 // stall ns a token
	}{
		{"no idle wait: its requests' stall only", 0, 1 << 20, 5},
		{"idle half the wait, a quarter of the bytes fetched", 50, 512 << 10, 5 + 0.25*50/2},
		{"nothing fetched: nothing charged", 50, 0, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := cyclicRun(100, 2)
			r.Budget = 1 << 20
			m := r.byPhase[event.PhaseDecode]
			m.wallNS, m.waitNS, m.bytes, m.idleWaitNS = 200, 100, 2<<20, tc.idle
			r.device([]span{{100, 300}}, 2<<20, 2, nil)
			got := prefetched{counts: newCounts(), demandBytes: map[uint8]uint64{}, fetchedBytes: map[uint8]uint64{event.PhaseDecode: tc.fetched},
				stallNS: map[uint8]float64{event.PhaseDecode: 10}, notes: map[string]bool{DeviceNote: true}}
			row := r.prefetchRow(r.Budget, PolicyPrefetchExperts, event.PhaseDecode, got, "")
			if math.Abs(row.StallNSPerToken-tc.want) > 1e-9 {
				t.Errorf("stall %v ns a token, want %v", row.StallNSPerToken, tc.want)
			}
		})
	}
}

// The helper's reads slow the command's compute by the disk profile's
// prefetch cost a byte: the row's tokens/s has that much more compute a
// token, and says so; a profile without the cost leaves it out and says
// that instead.
func TestAPrefetchRowChargesTheProfilesPrefetchCostToTheCommandsCompute(t *testing.T) {
	withCost := func(ns float64) *rundir.DiskProfile {
		return &rundir.DiskProfile{PrefetchCost: &rundir.PrefetchCost{ComputeNSPerByte: ns}}
	}
	for _, tc := range []struct {
		name    string
		disk    *rundir.DiskProfile
		fetched uint64
		compute float64 // ns a token, the run's 100 and the cost's
		note    string
	}{
		{"a cost of 2^-20 ns a byte, 1 MiB fetched: 1 ns more", withCost(1.0 / (1 << 20)), 1 << 20, 101, "the helper's reads cost the command's compute"},
		{"a cost of 0: as measured", withCost(0), 1 << 20, 100, ""},
		{"nothing fetched: nothing charged", withCost(1), 0, 100, ""},
		{"a profile without the cost: left out, and said", &rundir.DiskProfile{}, 1 << 20, 100, noPrefetchCost},
		{"no profile: left out, and said", nil, 1 << 20, 100, noPrefetchCost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := oneTokenPrefetchRow(tc.disk, tc.fetched)
			if want := 1e9 / (tc.compute + row.StallNSPerToken); math.Abs(row.TokensPerS-want) > 1e-6*want {
				t.Errorf("%v tokens/s, want %v: %v ns of compute and %v of stall", row.TokensPerS, want, tc.compute, row.StallNSPerToken)
			}
			if tc.note != "" && !strings.Contains(row.Note, tc.note) || tc.note == "" && strings.Contains(row.Note, "compute") {
				t.Errorf("note %q, want it to say %q", row.Note, tc.note)
			}
		})
	}
}

// A picked slice is left to its fault where the graph reaches it before
// the helper asked for it: the helper spends the kernel's work per byte
// (the run's idle fault wait per byte) on each slice it asks before, and
// the graph reaches a slice after its lead time, later by what it
// waited on.
func TestASliceTheGraphReachesBeforeTheHelperAsksIsLeftToItsFault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		idle  uint64  // the run's idle wait over its 400 pages
		lead  float64 // the third slice's lead (ns)
		raced int     // slices left to their faults in the one call
	}{
		{"a helper with no work per byte: only the first", 0, 1, 1},
		{"the helper behind the third slice's lead", 400 * pageSize, 1, 2},
		{"the third slice's lead past the helper's work", 400 * pageSize, 1e9, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{pages: 1000, byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {calls: 1, tokens: 1, bytes: 400 * pageSize, idleWaitNS: tc.idle}}}
			r.Model.Size = 1000 * pageSize
			// The first slice is a page: all of it its fault's, nothing
			// of it the helper's.
			c := call{phase: event.PhaseDecode}
			for e := range int32(3) {
				c.reads = append(c.reads, pageRange{max(100*e, 99), 100 + 100*e})
				c.of = append(c.of, readOf{tensor: uint32(e), expert: int16(e), layer: 0})
			}
			r.calls = append(r.calls, c)
			r.device(nil, 0, 0, nil) // no device rate: the requests untimed
			// One byte's kernel work is 1 ns with idle = 400 pages' bytes:
			// the second slice (100 pages) keeps the helper 409600 ns.
			leads := map[leadKey]float64{{0, true}: 0, {1, true}: 1, {2, true}: tc.lead}
			pf := r.simulatePrefetch(1000, 1, nil, PolicyPrefetchExperts, leads, false)
			if pf.raced != tc.raced {
				t.Errorf("%d slices left to their faults, want %d", pf.raced, tc.raced)
			}
		})
	}
}

// oneTokenPrefetchRow is the prefetch row of a run of one decode token
// (100 ns of compute, 100 of fault wait, none of it with the disk idle)
// whose prefetch fetched bytes and left 10 ns of stall, under disk.
func oneTokenPrefetchRow(disk *rundir.DiskProfile, fetched uint64) Row {
	r := cyclicRun(100, 2)
	r.Budget, r.disk = 1<<20, disk
	m := r.byPhase[event.PhaseDecode]
	m.calls, m.tokens, m.wallNS, m.waitNS, m.bytes = 1, 1, 200, 100, 2<<20
	r.device([]span{{100, 300}}, 2<<20, 2, nil)
	got := prefetched{counts: newCounts(), demandBytes: map[uint8]uint64{}, fetchedBytes: map[uint8]uint64{event.PhaseDecode: fetched},
		stallNS: map[uint8]float64{event.PhaseDecode: 10}, notes: map[string]bool{DeviceNote: true}}
	return r.prefetchRow(r.Budget, PolicyPrefetchExperts, event.PhaseDecode, got, "")
}

// One helper brings a token's prefetched bytes in at its own pace (the
// disk profile's asking thread's CPU a byte): a token whose compute and
// stall are shorter than that waits for it, and the note says so; a
// profile without the pace counts none, and says that.
func TestTheHelpersPaceBoundsAPrefetchRowsToken(t *testing.T) {
	withPace := func(ns float64) *rundir.DiskProfile {
		return &rundir.DiskProfile{PrefetchCost: &rundir.PrefetchCost{AskNSPerByte: ns}}
	}
	for _, tc := range []struct {
		name    string
		disk    *rundir.DiskProfile
		fetched uint64
		token   float64 // ns: the run's 100 of compute and 10 of stall, or the helper's
		note    string
	}{
		{"a helper quicker than the token: the token", withPace(1.0 / (1 << 20)), 1 << 20, 110, ""},
		{"a helper slower than the token: the helper's", withPace(1000.0 / (1 << 20)), 1 << 20, 1000, "bounds the token"},
		{"nothing fetched: the token", withPace(1), 0, 110, ""},
		{"a prefetch cost without the pace: the token, and said", withPace(0), 1 << 20, 110, rundir.NoPace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := oneTokenPrefetchRow(tc.disk, tc.fetched)
			// The run's idle wait is 0: the fetched bytes add no stall of
			// their own here.
			if want := 1e9 / tc.token; math.Abs(row.TokensPerS-want) > 1e-6*want {
				t.Errorf("%v tokens/s, want %v (a token of %v ns)", row.TokensPerS, want, tc.token)
			}
			if tc.note != "" && !strings.Contains(row.Note, tc.note) || tc.note == "" && strings.Contains(row.Note, "bounds the token") {
				t.Errorf("note %q, want it to say %q", row.Note, tc.note)
			}
		})
	}
}

// A request's pages arrive no faster than the helper brings them in: on a
// device faster than the helper's pace the graph waits for the helper;
// and, the device's rate unknown, a slice the graph reaches before the
// helper has sent the ones before it at its pace is left to its fault.
func TestRequestsArriveAtTheHelpersPaceWhereTheDeviceIsFaster(t *testing.T) {
	const slice = 100 * pageSize
	for _, tc := range []struct {
		name  string
		pace  float64 // ns a byte; 0: no profile
		lead  float64 // the third slice's lead (ns)
		stall float64 // ns the request leaves
		raced int
		paced bool
		timed bool // the device's rate known
	}{
		{"no pace: at the device's rate", 0, 1e9, 0, 1, false, true},
		{"a pace of 1 ns a byte: the second slice a byte a ns", 1, 1e9, slice - 1, 1, true, true},
		{"no device rate, a pace of 1 ns a byte, the third slice needed before the second is sent: its fault", 1, 2, 0, 2, false, false},
		{"no device rate, a pace of 1 ns a byte, the third slice needed after: asked", 1, 1e9, 0, 1, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{pages: 1000, byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {calls: 1, tokens: 1, bytes: 400 * pageSize}}}
			r.Model.Size = 1000 * pageSize
			if tc.pace > 0 {
				r.disk = &rundir.DiskProfile{PrefetchCost: &rundir.PrefetchCost{AskNSPerByte: tc.pace}}
			}
			// The first slice is a page: all of it its fault's, nothing
			// of it the helper's.
			c := call{phase: event.PhaseDecode}
			for e := range int32(3) {
				c.reads = append(c.reads, pageRange{max(100*e, 99), 100 + 100*e})
				c.of = append(c.of, readOf{tensor: uint32(e), expert: int16(e), layer: 0})
			}
			r.calls = append(r.calls, c)
			// A device of 10^15 bytes a second: it takes no time.
			r.device([]span{{0, 1}}, 1e6, 1, nil)
			if !tc.timed {
				r.device(nil, 0, 0, nil)
			}
			leads := map[leadKey]float64{{0, true}: 0, {1, true}: 1, {2, true}: tc.lead}
			pf := r.simulatePrefetch(1000, 1, nil, PolicyPrefetchExperts, leads, false)
			if got := pf.stallNS[event.PhaseDecode]; math.Abs(got-tc.stall) > 1e-3 || pf.raced != tc.raced || pf.paced != tc.paced {
				t.Errorf("stall %v ns, %d slices left to their faults, paced %v; want %v, %d, %v", got, pf.raced, pf.paced, tc.stall, tc.raced, tc.paced)
			}
		})
	}
}

// The helper asks for a layer's other picked slices while the graph's
// fault on the first is read around: the pages it allocates are its own,
// and the kernel marks for async readahead only a page the window
// allocated. So the graph's touch of the next slice starts no async
// window through the neighbours, where a marker of the window's own does.
func TestTheFirstSlicesWindowLeavesNoMarkerOnTheSlicesTheHelperIsAsking(t *testing.T) {
	// The first slice's fault at page 100 reads [68, 132) around it, its
	// marker at 116: inside the second slice [110, 140).
	for _, tc := range []struct {
		name  string
		reads []pageRange
		want  uint64 // pages the call read
	}{
		{"the marker on a page the helper asks for", []pageRange{{100, 110}, {110, 140}, {400, 500}}, 64 + 8 + 100},
		// The second slice ends before the marker: the window marks it, and
		// the graph's touch of the next slice's page past it reads on.
		{"the marker on a page no one asks for", []pageRange{{100, 110}, {110, 115}, {400, 500}}, 64 + 100 + 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{pages: 1000, byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {calls: 1, tokens: 1}}}
			r.Model.Size = 1000 * pageSize
			c := call{phase: event.PhaseDecode, reads: tc.reads}
			for e := range tc.reads {
				c.of = append(c.of, readOf{tensor: 1, expert: int16(e), layer: 0})
			}
			if tc.reads[1].end < 116 {
				// The graph then reads the marked page, as a dense read.
				c.reads = append(c.reads, pageRange{116, 117})
				c.of = append(c.of, readOf{tensor: 2, expert: -1, layer: 0})
			}
			r.calls = append(r.calls, c)
			r.device(nil, 0, 0, nil)
			pf := r.simulatePrefetch(1000, 64, nil, PolicyPrefetchExperts, nil, false)
			if got := pf.counts[event.PhaseDecode][0] / pageSize; got != tc.want {
				t.Errorf("the call read %d pages, want %d", got, tc.want)
			}
		})
	}
}

// The helper asks for every picked slice, the first too: the graph's
// fault on the first slice's first page reads its window, and the helper
// brings in what the window left of the slice, at the device's depth,
// not the graph one read-around at a time.
func TestTheHelperBringsInWhatTheFirstSlicesFaultLeft(t *testing.T) {
	for _, tc := range []struct {
		name            string
		ra              int32
		demand, fetched uint64 // pages
	}{
		// The window [92, 108) holds 8 pages of the slice [100, 200); its
		// marker (104) starts no async window, the rest being the helper's.
		{"a window smaller than the slice", 16, 16, 92 + 100},
		// The window [0, 512) holds all of it, its marker past it.
		{"a window over the whole slice", 512, 512, 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Run{pages: 1000, byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {calls: 1, tokens: 1}}}
			r.Model.Size = 1000 * pageSize
			c := call{phase: event.PhaseDecode, reads: []pageRange{{100, 200}, {700, 800}}}
			c.of = []readOf{{tensor: 1, expert: 0, layer: 0}, {tensor: 1, expert: 1, layer: 0}}
			r.calls = append(r.calls, c)
			r.device(nil, 0, 0, nil)
			pf := r.simulatePrefetch(1000, tc.ra, nil, PolicyPrefetchExperts, nil, false)
			ph := event.PhaseDecode
			if d, f := pf.demandBytes[ph]/pageSize, pf.fetchedBytes[ph]/pageSize; d != tc.demand || f != tc.fetched || pf.counts[ph][1] != 1 {
				t.Errorf("the fault read %d pages, the helper %d, %d major faults; want %d, %d, 1", d, f, pf.counts[ph][1], tc.demand, tc.fetched)
			}
		})
	}
}

// pickedRun is four decode calls of one layer over a 1000-page file: a
// dense tensor's 100 pages, then the slices (100 pages each) of the two
// experts the router picked, 1 or 2 and 5 or 6 in turn.
func pickedRun() *Run {
	r := &Run{pages: 1000, loaded: false, byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {calls: 4, tokens: 4}}}
	r.Model.Size = 1000 * pageSize
	for i := range int32(4) {
		c := call{phase: event.PhaseDecode}
		c.reads = append(c.reads, pageRange{0, 100})
		c.of = append(c.of, readOf{tensor: 0, expert: -1, layer: 0})
		for _, e := range []int32{1 + i%2, 5 + i%2} {
			c.reads = append(c.reads, pageRange{100 + 100*e, 200 + 100*e})
			c.of = append(c.of, readOf{tensor: 1, expert: int16(e), layer: 0})
		}
		r.calls = append(r.calls, c)
	}
	return r
}

// The helper's mincore reports a page not uptodate while a read holds it,
// so it asks for the picked pages the first slice's fault is still
// reading, the faulted page and those around it, and counts them as its
// own, and the releaser releases them with the rest. Left out, they kept
// their young bits past the layer: on the demo MoE at 160 MiB the model
// kept every layer's picks from token to token and read 139 MB a decode
// token where three released runs read 147–190, the kernel evicting
// first in, first out.
func TestTheReleaseTakesThePickedPagesTheFirstSlicesWindowRead(t *testing.T) {
	r := &Run{pages: 1000, byPhase: map[uint8]*measured{event.PhasePrefill: {}, event.PhaseDecode: {calls: 1, tokens: 1}}}
	r.Model.Size = 1000 * pageSize
	// Layer 0 picks [100, 110) and [110, 140): the first slice's fault at
	// page 100 reads [68, 132), the second slice's first 22 pages with it.
	// Layer 1's picks release layer 0's.
	c := call{phase: event.PhaseDecode, reads: []pageRange{{100, 110}, {110, 140}, {600, 610}, {700, 710}}}
	c.of = []readOf{{tensor: 1, expert: 0, layer: 0}, {tensor: 1, expert: 1, layer: 0}, {tensor: 2, expert: 0, layer: 1}, {tensor: 2, expert: 1, layer: 1}}
	r.calls = append(r.calls, c)
	r.device(nil, 0, 0, nil)
	for _, tc := range []struct {
		release bool
		want    int
	}{
		// The first slice's 10 pages, its faulted one too, the second's 30.
		{true, 10 + 30},
		{false, 0},
	} {
		if got := r.simulatePrefetch(1000, 64, nil, PolicyPrefetchExperts, nil, tc.release).released; got != tc.want {
			t.Errorf("release %v: %d pages released, want %d", tc.release, got, tc.want)
		}
	}
}
