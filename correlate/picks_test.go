package correlate

import (
	"maps"
	"reflect"
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

// A call that computed tokens lists the MoE layers with experts on the CPU
// side whose picks it did not see for every one of its tokens: none of
// them (a prefill's MUL_MAT_ID offloaded to the GPU), or some (a ubatch
// of the call left on the CPU). The model's last layer computes only the
// output rows, so one row seen is all of it; where later layers' experts
// are on the GPU, the last CPU layer computes every row. Layers on the GPU and
// those unseen run-wide are the run-wide list's; a call that computed
// nothing (no graph, no pick) and a run without picks list none.
func TestPicksUnseenCallsAreTheCallsThatLeftLayersRowsUnread(t *testing.T) {
	tensors := []event.Tensor{
		{ID: event.FirstTensor, Name: "blk.0.attn_q.weight", Layer: 0, Device: "Vulkan0"},
		{ID: event.FirstTensor + 1, Name: "blk.0.ffn_up_exps.weight", Layer: 0, Experts: 4, Device: "CPU_Mapped"},
		{ID: event.FirstTensor + 2, Name: "blk.1.ffn_up_exps.weight", Layer: 1, Experts: 4, Device: "CPU_Mapped"},
		{ID: event.FirstTensor + 3, Name: "blk.2.ffn_up_exps.weight", Layer: 2, Experts: 4, Device: "CPU_Mapped"},
	}
	cpuOnly := slices.Clone(tensors[1:4])
	// --n-cpu-moe 3: the last layer's experts on the GPU.
	gpuLast := append(slices.Clone(tensors), event.Tensor{ID: event.FirstTensor + 4, Name: "blk.3.ffn_up_exps.weight", Layer: 3, Experts: 4, Device: "Vulkan0"})
	// A buffer whose name could not be read proves no GPU.
	unnamed := slices.Clone(cpuOnly)
	unnamed[0].Device = event.DeviceUnnamed
	tokens := []event.TokenInfo{
		{Token: 1, Phase: event.PhasePrefill, NTokens: 40, StartNS: 1},
		{Token: 2, Phase: event.PhaseDecode, NTokens: 1, StartNS: 2},
		{Token: 3, Phase: event.PhaseDecode, NTokens: 1, StartNS: 3}, // returned before computing
	}
	decode := map[selKey]int32{{2, 0}: 1, {2, 1}: 1, {2, 2}: 1}
	with := func(m map[selKey]int32) map[selKey]int32 {
		out := maps.Clone(decode)
		maps.Copy(out, m)
		return out
	}
	graphed := map[uint32]bool{1: true, 2: true}
	for _, tc := range []struct {
		name    string
		tensors []event.Tensor
		rows    map[selKey]int32
		runWide []uint16
		want    []event.PicksUnseenCall
	}{
		{"every row seen", tensors, with(map[selKey]int32{{1, 0}: 40, {1, 1}: 40, {1, 2}: 1}), nil, nil},
		{"the prefill's MUL_MAT_ID offloaded but the last layer's", tensors, with(map[selKey]int32{{1, 2}: 1}), nil,
			[]event.PicksUnseenCall{{Token: 1, Phase: event.PhasePrefill, Tokens: 40, Offload: true, Layers: []event.PicksUnseenLayer{{Layer: 0}, {Layer: 1}}}}},
		{"a ubatch of the prefill left on the cpu", tensors, with(map[selKey]int32{{1, 0}: 8, {1, 1}: 8, {1, 2}: 1}), nil,
			[]event.PicksUnseenCall{{Token: 1, Phase: event.PhasePrefill, Tokens: 40, Offload: true, Layers: []event.PicksUnseenLayer{{Layer: 0, Rows: 8}, {Layer: 1, Rows: 8}}}}},
		{"the last layer unseen in a call", tensors, with(map[selKey]int32{{1, 0}: 40, {1, 1}: 40}), nil,
			[]event.PicksUnseenCall{{Token: 1, Phase: event.PhasePrefill, Tokens: 40, Offload: true, Layers: []event.PicksUnseenLayer{{Layer: 2}}}}},
		{"the last layer's experts on the gpu: the last cpu layer computes every row", gpuLast, with(map[selKey]int32{{1, 0}: 40, {1, 1}: 40, {1, 2}: 1}), nil,
			[]event.PicksUnseenCall{{Token: 1, Phase: event.PhasePrefill, Tokens: 40, Offload: true, Layers: []event.PicksUnseenLayer{{Layer: 2, Rows: 1}}}}},
		{"the last layer's experts on the gpu, every cpu row seen", gpuLast, with(map[selKey]int32{{1, 0}: 40, {1, 1}: 40, {1, 2}: 40}), nil, nil},
		{"a layer unseen run-wide is that list's", tensors, map[selKey]int32{{1, 1}: 40, {1, 2}: 1, {2, 1}: 1, {2, 2}: 1}, []uint16{0}, nil},
		{"rows missed without a gpu: not offload", cpuOnly, with(map[selKey]int32{{1, 0}: 40, {1, 1}: 39, {1, 2}: 1}), nil,
			[]event.PicksUnseenCall{{Token: 1, Phase: event.PhasePrefill, Tokens: 40, Layers: []event.PicksUnseenLayer{{Layer: 1, Rows: 39}}}}},
		{"rows missed beside an unnamed buffer: not offload", unnamed, with(map[selKey]int32{{1, 0}: 40, {1, 1}: 39, {1, 2}: 1}), nil,
			[]event.PicksUnseenCall{{Token: 1, Phase: event.PhasePrefill, Tokens: 40, Layers: []event.PicksUnseenLayer{{Layer: 1, Rows: 39}}}}},
		{"no picks in the run", tensors, nil, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := picksUnseenCalls(tc.tensors, tokens, tc.rows, graphed, tc.runWide)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("unseen calls\n%+v, want\n%+v", got, tc.want)
			}
		})
	}
}
