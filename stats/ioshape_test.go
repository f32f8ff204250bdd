package stats

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
)

func TestFlightCountsBusyTimeRequestsInFlightAndThePeak(t *testing.T) {
	for _, c := range []struct {
		name       string
		iv         [][2]uint64 // in order of starts
		lo, hi     uint64
		busy, area uint64
		peak       int
	}{
		{"none", nil, 0, 100, 0, 0, 0},
		{"one alone", [][2]uint64{{10, 20}}, 0, 100, 10, 10, 1},
		{"two overlapping", [][2]uint64{{10, 30}, {20, 40}}, 0, 100, 30, 40, 2},
		{"one inside another", [][2]uint64{{10, 40}, {20, 30}}, 0, 100, 30, 40, 2},
		{"end meets start: never two at once", [][2]uint64{{10, 20}, {20, 30}}, 0, 100, 20, 20, 1},
		{"three, the first ended before the third", [][2]uint64{{0, 10}, {5, 30}, {12, 20}}, 0, 100, 30, 43, 2},
		{"three at once", [][2]uint64{{0, 50}, {10, 50}, {20, 30}}, 0, 100, 50, 100, 3},
		{"clipped to the window", [][2]uint64{{0, 50}, {40, 200}}, 20, 60, 40, 50, 2},
		{"outside the window", [][2]uint64{{0, 10}, {70, 80}}, 20, 60, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFlight(c.lo, c.hi)
			for _, x := range c.iv {
				f.add(x[0], x[1])
			}
			if f.u.total != c.busy || f.area != c.area || f.peak != c.peak {
				t.Errorf("busy %d, area %d, peak %d; want %d, %d, %d", f.u.total, f.area, f.peak, c.busy, c.area, c.peak)
			}
		})
	}
}

// blockRec is one block read request of a model tensor, issued at issue
// and completed at done within token tok (done 0: its completion unseen).
func blockRec(tok uint32, issue, done, bytes uint64) []event.Event {
	e := event.Event{Kind: event.KindBlock, Token: tok, Tensor: event.FirstTensor, Bytes: bytes, Ts: done, Dur: done - issue}
	if done == 0 {
		e.Ts, e.Dur, e.Class = issue, 0, event.ClassCompletionUnseen
	}
	return []event.Event{e}
}

func faultRec(tok uint32, start, end uint64) []event.Event {
	return []event.Event{{Kind: event.KindFault, Class: event.ClassMajor, Token: tok, Tensor: event.FirstTensor, Ts: end, Dur: end - start}}
}

func TestTheShaperClipsEachRequestToTheCallsItOverlaps(t *testing.T) {
	tokens := []event.TokenInfo{
		{Token: 1, Phase: event.PhasePrefill, StartNS: 100, EndNS: 200},
		{Token: 2, Phase: event.PhaseDecode, StartNS: 300, EndNS: 400},
		{Token: 3, Phase: event.PhaseDecode}, // no times
	}
	sh := newShaper()
	defer sh.Close()
	for _, rec := range [][]event.Event{
		blockRec(1, 50, 120, 4096),  // from before the first call: 20 ns in it
		blockRec(1, 110, 150, 4096), // two in flight over [110, 120)
		blockRec(2, 180, 320, 8192), // across the gap: 20 ns in each call
		blockRec(2, 350, 0, 4096),   // unseen: no time, its bytes counted
		blockRec(2, 360, 380, 4096), // alone
		{{Kind: event.KindBlock, Class: event.ClassWrite, Token: 2, Tensor: event.FirstTensor, Ts: 390, Dur: 80}},
		{{Kind: event.KindBlock, Token: 2, Tensor: event.TensorOther, Ts: 395, Dur: 90}}, // no model's
		faultRec(1, 105, 160),
		faultRec(1, 110, 130),
		faultRec(2, 310, 330),
		{{Kind: event.KindFault, Class: event.ClassMajor, Token: 2, Tensor: event.TensorAnon, Ts: 399, Dur: 99}},
	} {
		if err := sh.record(rec); err != nil {
			t.Fatal(err)
		}
	}
	got, err := sh.shapes(tokens, waits{1: {stall: 75, wait: 30}})
	if err != nil {
		t.Fatal(err)
	}
	want := []shape{
		{wall: 100, timed: true, busy: 20 + 30 + 20, area: 20 + 40 + 20, peak: 2, stall: 55, faultArea: 75, faultPeak: 2, requests: 2, bytes: 8192, stallSum: 75, waitSum: 30},
		{wall: 100, timed: true, busy: 20 + 20, area: 40, peak: 1, stall: 20, faultArea: 20, faultPeak: 1, requests: 2, unseen: 1, bytes: 16384},
		{},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("token %d: got %+v, want %+v", tokens[i].Token, got[i], want[i])
		}
	}
}

// A token the events name that has no llama_decode record (none of the
// run's tokens) still gets its shape, untimed, with its requests counted:
// its row is NA with why, never left out.
func TestTheShaperGivesEveryTokenTheEventsNameARow(t *testing.T) {
	sh := newShaper()
	defer sh.Close()
	for _, rec := range [][]event.Event{blockRec(1, 110, 150, 4096), blockRec(7, 500, 0, 8192), faultRec(7, 510, 520)} {
		if err := sh.record(rec); err != nil {
			t.Fatal(err)
		}
	}
	toks := sh.everyToken([]event.TokenInfo{{Token: 1, Phase: event.PhaseDecode, StartNS: 100, EndNS: 200}})
	if len(toks) != 2 || toks[1].Token != 7 || toks[1].StartNS != 0 {
		t.Fatalf("tokens %+v: want token 7 added, untimed", toks)
	}
	got, err := sh.shapes(toks, waits{})
	if err != nil {
		t.Fatal(err)
	}
	if got[1].timed || got[1].unseen != 1 || got[1].bytes != 8192 {
		t.Fatalf("token 7: %+v; want untimed, its request counted", got[1])
	}
	if row := got[1].figures(shapeRun{diskNA: "no disk profile"}); row[1].NA == "" {
		t.Fatalf("token 7's busy share %+v: want NA with why", row[1])
	}
}

func TestTheVerdictTakesStallThenBusyThenBandwidth(t *testing.T) {
	// 1 GB/s at depth 1, 1.6 GB/s at depth 4, reads of 1 MiB: depth gains
	// less than twice.
	disk := &rundir.DiskProfile{Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 1 << 20, BytesPerSec: 1e9}, {Depth: 4, BlockBytes: 1 << 20, BytesPerSec: 1.6e9}}}
	withDisk := shapeRun{disk: disk}
	// The bench's far disk: 2 ms a read however many are in flight, 64
	// MB/s at depth 1 and 512 at depth 16, reads of 128 KiB.
	far := shapeRun{disk: &rundir.DiskProfile{Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 128 << 10, BytesPerSec: 64e6}, {Depth: 16, BlockBytes: 128 << 10, BytesPerSec: 512e6}}}}
	noDisk := shapeRun{diskNA: "no disk profile: run iocorr doctor --disk FILE"}
	const s = 1_000_000_000 // ns: a second's wall, bytes are then bytes/s
	for _, c := range []struct {
		name    string
		sh      shape
		run     shapeRun
		verdict string // or the NA reason's start, after "NA: "
	}{
		{"little stall: compute, whatever the device did", shape{wall: s, timed: true, stall: s / 5, busy: s, area: s, requests: 1000, bytes: 1 << 30}, noDisk, "compute"},
		{"much stall, little of it asleep: compute, the kernel's work", shape{wall: s, timed: true, stall: s / 2, stallSum: 100, waitSum: 10, busy: s / 5, area: s / 5, requests: 200, bytes: 200 << 20}, withDisk, "compute"},
		{"much stall, most of it asleep, an idle device: latency", shape{wall: s, timed: true, stall: s / 2, stallSum: 100, waitSum: 80, busy: s / 5, area: s / 5, requests: 200, bytes: 200 << 20}, withDisk, "latency"},
		{"waits not timed: judged by the stall they are part of", shape{wall: s, timed: true, stall: s / 2, stallSum: 100, waitSum: 10, busy: s / 5, area: s / 5, requests: 200, bytes: 200 << 20}, shapeRun{disk: disk, waitNA: "not measured"}, "latency"},
		{"a busy device: bandwidth, without a profile", shape{wall: s, timed: true, stall: s / 2, busy: s * 9 / 10, area: s * 9 / 10, requests: 100, bytes: 100 << 20}, noDisk, "bandwidth"},
		{"reads near the device's bandwidth at their depth: bandwidth", shape{wall: s, timed: true, stall: s / 2, busy: s / 2, area: s / 2, requests: 800, bytes: 800 << 20}, withDisk, "bandwidth"},
		{"an idle device under stall: latency", shape{wall: s, timed: true, stall: s / 2, busy: s / 5, area: s / 5, requests: 200, bytes: 200 << 20}, withDisk, "latency"},
		{"a device kept busy by one read at a time that serves many at once: latency", shape{wall: s, timed: true, stall: s * 9 / 10, busy: s * 9 / 10, area: s * 9 / 10, requests: 460, bytes: 460 * 128 << 10}, far, "latency"},
		{"the same device kept busy at depth 16: bandwidth", shape{wall: s, timed: true, stall: s * 9 / 10, busy: s * 9 / 10, area: 16 * s * 9 / 10, requests: 3500, bytes: 3500 * 128 << 10}, far, "bandwidth"},
		{"depth 4 serves more: the same bytes at depth 4 are latency", shape{wall: s, timed: true, stall: s / 2, busy: s / 2, area: 2 * s, requests: 800, bytes: 800 << 20}, withDisk, "latency"},
		{"undecided without a profile", shape{wall: s, timed: true, stall: s / 2, busy: s / 5, area: s / 5, requests: 200, bytes: 200 << 20}, noDisk, "NA: no disk profile"},
		{"undecided with requests unseen", shape{wall: s, timed: true, stall: s / 2, busy: s / 5, area: s / 5, requests: 20, unseen: 5, bytes: 25 << 20}, withDisk, "NA: block read requests of the models have no completion"},
		{"a few unseen are within the figures' error", shape{wall: s, timed: true, stall: s / 2, busy: s / 5, area: s / 5, requests: 1000, unseen: 5, bytes: 200 << 20}, withDisk, "latency"},
		{"stall without device reads: latency", shape{wall: s, timed: true, stall: s / 2}, withDisk, "latency"},
		{"requests that took no time on the device keep no depth: latency", shape{wall: s, timed: true, stall: s / 2, requests: 3}, withDisk, "latency"},
		{"no times", shape{}, withDisk, "NA: the token has no llama_decode"},
	} {
		t.Run(c.name, func(t *testing.T) {
			row := c.sh.figures(c.run)
			v := row[len(row)-1]
			got := v.S
			if v.NA != "" {
				got = "NA: " + v.NA
			}
			if len(got) < len(c.verdict) || got[:len(c.verdict)] != c.verdict {
				t.Errorf("verdict %q, want %q (row %v)", got, c.verdict, row)
			}
			for i, v := range row {
				if v.NA == "" && v.S == "" && math.IsNaN(v.F) {
					t.Errorf("column %s is NaN without a reason", ioShapeColumns[i].Name)
				}
			}
		})
	}
}

// The wait share is the part of the stall share the faults spent asleep
// off the CPU, in the proportion their summed waits bear to their summed
// stalls; a run that did not time the waits says so.
func TestTheWaitAndPreemptedSharesAreTheStallsSharesThatWereEach(t *testing.T) {
	const s = 1_000_000_000
	for _, c := range []struct {
		name            string
		sh              shape
		waitNA          string
		wait, preempted float64
		na              string
	}{
		{"a quarter of the stall asleep", shape{wall: s, timed: true, stall: s / 2, stallSum: 800, waitSum: 200}, "", 0.125, 0, ""},
		{"all of it asleep", shape{wall: s, timed: true, stall: s / 2, stallSum: 800, waitSum: 800}, "", 0.5, 0, ""},
		{"a quarter asleep, an eighth preempted", shape{wall: s, timed: true, stall: s / 2, stallSum: 800, waitSum: 200, preemptedSum: 100}, "", 0.125, 0.0625, ""},
		{"no stall, no wait", shape{wall: s, timed: true}, "", 0, 0, ""},
		{"not timed in this run", shape{wall: s, timed: true, stall: s / 2, stallSum: 800}, "not measured: no sched_switch", 0, 0, "not measured: no sched_switch"},
		{"a stall the aggregates lack", shape{wall: s, timed: true, stall: s / 2}, "", 0, 0, "the token's faults in the models have no stall"},
	} {
		t.Run(c.name, func(t *testing.T) {
			row := c.sh.figures(shapeRun{diskNA: "no disk profile", waitNA: c.waitNA})
			for col, want := range map[string]float64{"wait_share": c.wait, "preempted_share": c.preempted} {
				v := row[slices.IndexFunc(ioShapeColumns, func(x Column) bool { return x.Name == col })]
				if c.na != "" {
					if !strings.HasPrefix(v.NA, c.na) {
						t.Errorf("%s %+v, want NA %q", col, v, c.na)
					}
					continue
				}
				if v.NA != "" || math.Abs(v.F-want) > 1e-12 {
					t.Errorf("%s %+v, want %v", col, v, want)
				}
			}
		})
	}
}

// A model on a device mapper's disk (LVM, dm-crypt) has its requests
// issued at the disks beneath, at sectors iocorr does not map back: the
// shape says so, where it would say the disk was idle and read nothing.
func TestTheIOShapeIsNAWhereAModelsRequestsCannotBeToldApart(t *testing.T) {
	meta := &rundir.Meta{Models: []rundir.ModelFile{{Path: "a.gguf"}, {Path: "b.gguf", BlockNA: "its disk dm-1 is built on nvme0n1p3 (device mapper or md)"}}}
	s := shape{wall: 1000, timed: true, stall: 600, stallSum: 600, waitSum: 500}
	row := s.figures(newShapeRun(meta))
	for i, c := range ioShapeColumns {
		switch c.Name {
		case "busy_share", "requests", "bytes_read_bytes", "read_bandwidth_mb_per_s", "requests_in_flight_mean":
			if !strings.Contains(row[i].NA, "b.gguf: its disk dm-1 is built on nvme0n1p3") {
				t.Errorf("%s = %+v, want NA naming the model and its disk", c.Name, row[i])
			}
		case "stall_share":
			if row[i].NA != "" || row[i].F != 0.6 {
				t.Errorf("stall share %+v, want 0.6: the faults are the model's whatever its disk", row[i])
			}
		}
	}
}
