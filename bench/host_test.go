package bench

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestStolenShareIsStealOverAllCPUTimeBetweenTwoReads(t *testing.T) {
	tests := []struct {
		name       string
		a, b       hostCPU
		want       float64
		wantNoTime bool
	}{
		{"no steal", hostCPU{total: 100, steal: 5}, hostCPU{total: 300, steal: 5}, 0, false},
		{"a third stolen", hostCPU{total: 100, steal: 5}, hostCPU{total: 400, steal: 105}, 1.0 / 3, false},
		{"steal before the first read does not count", hostCPU{total: 1000, steal: 900}, hostCPU{total: 1100, steal: 910}, 0.1, false},
		{"no time passed", hostCPU{total: 100, steal: 5}, hostCPU{total: 100, steal: 5}, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := stolenShare(tc.a, tc.b)
			if tc.wantNoTime {
				if !errors.Is(err, errNoHostTime) {
					t.Fatalf("stolenShare = %v, %v; want errNoHostTime", got, err)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-12 {
				t.Fatalf("stolenShare = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestHostCPUOfThisMachineGrows(t *testing.T) {
	a, err := readHostCPU()
	if err != nil {
		t.Fatal(err)
	}
	// Idle time is CPU time too: a few of the kernel's ticks pass.
	time.Sleep(100 * time.Millisecond)
	b, err := readHostCPU()
	if err != nil {
		t.Fatal(err)
	}
	if b.total <= a.total || b.steal < a.steal || b.steal > b.total {
		t.Errorf("host CPU went from %+v to %+v: want the total to grow and steal within it", a, b)
	}
}
