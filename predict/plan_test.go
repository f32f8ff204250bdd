package predict

import (
	"fmt"
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
			p, err := r.plan(tc.budget, pin.ModelID{}, ts)
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
