package diff_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/diff"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// deviceRun is a store whose tensor i lives on devices[i] ("" where no
// probe placed it), tensor i read reads[i] bytes in token 1 (0: nothing
// charged).
func deviceRun(t *testing.T, devices []string, reads []uint64) diff.Run {
	tensors := slices.Clone(storetest.Pseudos)
	var aggs []event.Agg
	for i, d := range devices {
		id := uint32(3 + i)
		tensors = append(tensors, event.Tensor{ID: id, Name: "blk." + string(rune('0'+i)) + ".attn_q.weight", Layer: i, Device: d, Copied: d == "Vulkan0"})
		if reads[i] > 0 {
			aggs = append(aggs, agg(1, id, -1, 1, reads[i], 0))
		}
	}
	st := storetest.FromResult(t, event.Result{Tensors: tensors, Ops: []string{""}, Aggs: aggs,
		Tokens: []event.TokenInfo{{Token: 1, Phase: event.PhasePrefill}}})
	return diff.Run{Store: st, Meta: &rundir.Meta{Finished: true, Complete: true}}
}

func TestCompareByDeviceNamesTheDevicesOnlyOneRunPlacedWeightsOn(t *testing.T) {
	// A: a hybrid run, layer 0 copied into Vulkan0, layer 1 streamed. B:
	// the same on the CPU alone, layer 2 placed by no probe, layer 1 read
	// nothing (a measured zero on a device it has).
	a := deviceRun(t, []string{"Vulkan0", "CPU_Mapped"}, []uint64{8192, 4096})
	b := deviceRun(t, []string{"CPU_Mapped", "CPU_Mapped", ""}, []uint64{12288, 0, 4096})
	res, err := diff.Compare(a, b, diff.Options{By: "device", Counters: []string{"bytes_read"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		key    string
		in     diff.In
		a, b   int64 // -1: NA
		reason string
	}{
		{"Vulkan0", diff.OnlyA, 8192, -1, "run B: no weight of run B lived on this device"},
		{"CPU_Mapped", diff.Both, 4096, 12288, ""},
		{event.DeviceUnknown, diff.OnlyB, -1, 4096, "run A: no weight of run A lived on this device"},
	}
	if len(res.Groups) != len(tests) {
		t.Fatalf("groups %+v, want %d", res.Groups, len(tests))
	}
	for _, tt := range tests {
		i := slices.IndexFunc(res.Groups, func(g diff.Group) bool { return g.Key == tt.key })
		if i < 0 {
			t.Errorf("no group %s", tt.key)
			continue
		}
		g := res.Groups[i]
		c := g.Cells[0]
		side := func(s diff.Side, want int64) bool {
			if want < 0 {
				return s.NA != ""
			}
			return s.NA == "" && int64(s.V) == want
		}
		if g.In != tt.in || !side(c.A, tt.a) || !side(c.B, tt.b) || !strings.Contains(c.DeltaNA, tt.reason) || (tt.reason == "" && c.Delta != tt.b-tt.a) {
			t.Errorf("%s: in %v, cell %+v; want in %v, A %d, B %d, reason %q", tt.key, g.In, c, tt.in, tt.a, tt.b, tt.reason)
		}
	}
}
