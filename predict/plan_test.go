package predict

import (
	"fmt"
	"slices"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/pin"
)

// planRun is cyclicRun cut into ten tensors of 100 pages, each read by
// every call, measured as the kernel model would read it at budget.
func planRun(budget int64) (*Run, []event.Tensor) {
	r := cyclicRun(1000, 5)
	r.Budget = budget
	var ts []event.Tensor
	for i := range 10 {
		off := int64(i) * 100 * pageSize
		ts = append(ts, event.Tensor{ID: uint32(i), Name: fmt.Sprintf("t%d", i)})
		r.unit = append(r.unit, unit{tensor: uint32(i), expert: -1, r: bytesToPages(off, 100*pageSize), off: off, length: 100 * pageSize, reads: 5})
	}
	got, _ := r.simulate(r.capacityPages(budget, 0), 32, nil, false)
	r.byPhase[event.PhaseDecode].bytes = got[event.PhaseDecode][0]
	return r, ts
}

func TestPlanPinsOnlyWhereThePredictionBeatsTheKernel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		budget int64
		want   string
	}{
		// Everything fits: the kernel reads nothing in decode, no pin can
		// do better.
		{"the model fits", 2000 * pageSize, PinNothing},
		// A cyclic stream of 1000 pages in 600: the kernel re-reads it all
		// every call; pinning half of it leaves the other half to cycle.
		{"a stream the kernel re-reads whole", 600 * pageSize, Pin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, ts := planRun(tc.budget)
			p, err := r.plan(tc.budget, 0, pin.ModelID{}, ts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Recommendation != tc.want {
				t.Fatalf("recommends %q (%s), want %q", p.Recommendation, p.Reason, tc.want)
			}
			if tc.want == PinNothing && (len(p.Ranges) != 0 || p.Pinned != 0) {
				t.Errorf("pins nothing, yet lists %d ranges of %d bytes", len(p.Ranges), p.Pinned)
			}
			if tc.want == Pin {
				if p.Pinned > tc.budget || p.Pinned == 0 {
					t.Errorf("pins %d bytes of a %d budget", p.Pinned, tc.budget)
				}
				k, pl := p.Expected[PolicyKernel][ColBytes], p.Expected[PolicyPlan][ColBytes]
				if k == nil || pl == nil || *pl >= *k {
					t.Errorf("expects %v bytes pinned against the kernel's %v", pl, k)
				}
			}
		})
	}
}

// A pin leaves the cache room for two read-around windows: in less, a
// fault's read-around evicts the page it was for (qwen3moe's plan at
// 128 MiB left 5 MiB of a 16 MiB window, and its pinned run read 68× the
// bytes). The stream of 1000 pages in 600 pins half of it with a small
// window; with a 250-page window it may pin at most 100 pages, and with
// a 300-page one nothing.
func TestAPinLeavesTheCacheRoomForTwoReadArounds(t *testing.T) {
	const budget = 600 * pageSize
	for _, tc := range []struct {
		window, most int64 // pages
	}{
		{32, 600 - 64},
		{250, 100},
		{300, 0},
	} {
		t.Run(fmt.Sprintf("window of %d pages", tc.window), func(t *testing.T) {
			r, ts := planRun(budget)
			p, err := r.plan(budget, tc.window*pageSize, pin.ModelID{}, ts)
			if err != nil {
				t.Fatal(err)
			}
			if p.Pinned > tc.most*pageSize {
				t.Errorf("pins %d pages (%s), want at most %d", p.Pinned/pageSize, p.Reason, tc.most)
			}
			if tc.most == 0 && p.Recommendation != PinNothing {
				t.Errorf("recommends %q, want %q: no pin leaves room for two windows", p.Recommendation, PinNothing)
			}
		})
	}
}

// A layer's weights are streamed as the 2026 llama.cpp's graph reads them
// (the order of the first faults of every decode call of the recorded
// demo MoE and qwen3moe runs), not as the file stores them: the file
// here holds them alphabetically, as llama.cpp's converters write them.
func TestGraphOrderIsTheOrderLlamaCppReadsALayer(t *testing.T) {
	want := []string{"attn_norm", "attn_q", "attn_q_norm", "attn_v", "attn_k", "attn_k_norm", "attn_output",
		"ffn_norm", "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}
	file := slices.Sorted(slices.Values(want))
	var ts []event.Tensor
	for i, role := range file {
		ts = append(ts, event.Tensor{ID: uint32(i), Layer: 0, Role: role, Offset: int64(i) << 20})
	}
	ts = append(ts, event.Tensor{ID: 99, Layer: -1, Role: "output", Offset: 0})
	var got []string
	for _, tn := range graphOrder(ts) {
		got = append(got, tn.Role)
	}
	if want := append(want, "output"); !slices.Equal(got, want) {
		t.Errorf("streams %v, want %v", got, want)
	}
}

// A plan ranked with a given read-around window says so, and expects of
// the kernel and of its pin what predict says at that window: a pin's
// bytes depend on the window where the kernel's alone hardly do, so the
// window must travel with the plan.
func TestAPlanRankedWithAGivenWindowExpectsWhatPredictSaysAtIt(t *testing.T) {
	const budget = 600 * pageSize
	for _, ra := range []int64{0, 4 * pageSize, 64 * pageSize} {
		t.Run(fmt.Sprintf("readahead %d", ra), func(t *testing.T) {
			r, ts := planRun(budget)
			p, err := r.plan(budget, ra, pin.ModelID{}, ts)
			if err != nil {
				t.Fatal(err)
			}
			want := ra
			if ra == 0 {
				want = int64(r.calibrate()) * pageSize
			}
			if p.ReadaheadBytes != want {
				t.Errorf("the plan says it used a %d-byte window, want %d", p.ReadaheadBytes, want)
			}
			var pinned [][2]int64
			for _, rg := range p.Ranges {
				pinned = append(pinned, [2]int64{rg.Offset, rg.Length})
			}
			res, err := Predict(r, Options{Budgets: []int64{budget}, Pinned: pinned, Readahead: p.ReadaheadBytes})
			if err != nil {
				t.Fatal(err)
			}
			for _, row := range res.Rows {
				exp := p.Expected[row.Policy]
				if row.Phase != "decode" || exp == nil {
					continue
				}
				if got := exp[ColBytes]; got == nil || *got != row.BytesReadPerToken {
					t.Errorf("%s: the plan expects %v bytes per decode token, predict at its window says %.0f", row.Policy, got, row.BytesReadPerToken)
				}
			}
		})
	}
}

// The window a prediction uses unless told otherwise is the kernel's for
// a llama.cpp mapping: the disk's read_ahead_kb doubled by the loader's
// POSIX_FADV_SEQUENTIAL. The run's own bytes choose it only when asked
// (calibrate) or when the run did not record its disk's window.
func TestTheDefaultWindowIsTheDisksDoubledAndCalibratedOnlyWhenAskedOrUnknown(t *testing.T) {
	kb := func(n uint64) *uint64 { return &n }
	r, _ := planRun(600 * pageSize)
	calibrated := r.calibrate()
	for _, tc := range []struct {
		name      string
		diskKB    *uint64
		requested int64
		want      int32
	}{
		{"the disk's 8 MiB doubled", kb(8192), 0, 4096},
		{"the disk's 128 KiB doubled", kb(128), 0, 64},
		{"a window asked for", kb(8192), 64 * pageSize, 64},
		{"a window under a page is a page", kb(8192), 100, 1},
		{"calibrate asked for", kb(8192), ReadaheadCalibrate, calibrated},
		{"no disk window recorded", nil, 0, calibrated},
		{"a disk window of 0 recorded", kb(0), 0, calibrated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.Model.Block.ReadAheadKB = tc.diskKB
			if got := r.window(tc.requested); got != tc.want {
				t.Errorf("window(%d) with read_ahead_kb %v = %d pages, want %d", tc.requested, tc.diskKB, got, tc.want)
			}
		})
	}
}
