package correlate

import (
	"slices"
	"testing"

	"github.com/iocorr/iocorr/event"
)

// A MoE layer whose picks no probe saw in a run that decoded is named (its
// experts ran where no CPU graph reads the router); in a run with no pick
// at all, those whose experts lived off the CPU (every layer on the GPU),
// not those of unknown device; a run that decoded nothing names none.
func TestPicksUnseenAreTheMoELayersWithoutPicksInARunWithPicks(t *testing.T) {
	tensors := []event.Tensor{
		{Name: "token_embd.weight", Layer: -1},
		{Name: "blk.0.ffn_up_exps.weight", Layer: 0, Experts: 4},
		{Name: "blk.0.ffn_down_exps.weight", Layer: 0, Experts: 4},
		{Name: "blk.1.attn_q.weight", Layer: 1},
		{Name: "blk.1.ffn_up_exps.weight", Layer: 1, Experts: 4},
		{Name: "blk.2.ffn_up_exps.weight", Layer: 2, Experts: 4, Device: "Vulkan0"},
		{Name: "blk.3.ffn_up.weight", Layer: 3},
	}
	for _, tc := range []struct {
		name    string
		sel     []event.ExpertSel
		decoded bool
		want    []uint16
	}{
		{"every MoE layer picked", []event.ExpertSel{{Token: 1, Layer: 0}, {Token: 1, Layer: 1}, {Token: 2, Layer: 2}}, true, nil},
		{"the last layers on another backend", []event.ExpertSel{{Token: 1, Layer: 0, Expert: 3}}, true, []uint16{1, 2}},
		{"no picks: the layers on the GPU", nil, true, []uint16{2}},
		{"nothing decoded", nil, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := picksUnseen(tensors, tc.sel, tc.decoded); !slices.Equal(got, tc.want) {
				t.Errorf("unseen %v, want %v", got, tc.want)
			}
		})
	}
}
