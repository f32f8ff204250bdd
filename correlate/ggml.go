// ggml's graph (bpf/ggml.bpf.h): nodes, their buffers' placement, and
// the router's expert picks, whose unseen calls Finish counts.

package correlate

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/wire"
)

// readsLayout says whether records of type typ were read from ggml
// structs with the layout (graph nodes, ops, expert picks).
func readsLayout(typ uint16) bool {
	switch typ {
	case uint16(wire.EventTypeEV_NODE), uint16(wire.EventTypeEV_OP), uint16(wire.EventTypeEV_EXPERTS), uint16(wire.EventTypeEV_PLACE):
		return true
	}
	return false
}

// selKey is one router decision site: a token's MoE layer.
type selKey struct {
	token uint32
	layer uint16
}

func (c *Correlator) node(n *wire.NodeEvent) {
	name := wire.CString(n.WeightName[:])
	id, ok := c.byName[name]
	if !ok {
		return // not a weight: inp_tokens, cache_k_l0, ...
	}
	if c.meta.Layout.Left(wire.CString(n.NodeName[:]), name) {
		return // failed validation (rundir.Meta.NodesNA): not to be read
	}
	t := &c.tensors[id]
	if t.Op == 0 {
		t.Op = c.opID(c.opName(n.Op))
	}
	// A weight is file-backed only in a model's own mapping: a driver's
	// host-visible buffer is a mapping of its device file or a memfd.
	dev, ino := n.Dev, n.Ino
	if n.VmaBusy != 0 {
		dev, ino = c.fileAt(&n.Hdr, n.WeightData)
	}
	if ino == 0 || c.modelOf(dev, ino) == nil {
		t.NotFileBacked = true
	}
	c.placeIn(id, n.WeightBuffer)
}

// fileAt is the file that address addr of the event's process mapped
// when the kernel could not look it up (its vma_busy): the mappings known
// to user space; 0 when none is.
func (c *Correlator) fileAt(hdr *wire.EventHdr, addr uint64) (dev uint32, ino uint64) {
	if m := c.vm.resolve(hdr.Tgid, addr, hdr.Ts); m != nil {
		return m.dev, m.ino
	}
	return 0, 0
}

// place is a weight the loader copied from the model's mapping into a
// backend's buffer.
func (c *Correlator) place(p *wire.PlaceEvent) {
	id, ok := c.byName[wire.CString(p.Name[:])]
	if !ok {
		return
	}
	if p.VmaBusy != 0 {
		// The kernel sends a copy only from a file mapping, and this one
		// it could not look up.
		if _, ino := c.fileAt(&p.Hdr, p.Data); ino == 0 {
			return
		}
	}
	c.tensors[id].Copied = true
	c.placeIn(id, p.Buffer)
}

// placeIn names the device of tensor id from buffer, by the buffer's
// name known now (a buffer is named while the model loads, before its
// weights are copied or read): the weight's first buffer stands.
func (c *Correlator) placeIn(id uint32, buffer uint64) {
	if buffer == 0 || c.tensors[id].Device != "" {
		return
	}
	if c.bufOf[id] == 0 {
		c.bufOf[id] = buffer
	}
	c.tensors[id].Device = c.bufName[buffer]
}

func (c *Correlator) expertsSel(e *wire.ExpertsEvent) {
	name := wire.CString(e.Name[:])
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return
	}
	layer, err := strconv.Atoi(name[i+1:])
	if err != nil || layer < 0 || layer > 0xffff {
		return
	}
	// The ids of a layer may be read at more than one node (the top-k and
	// the weights gather); count them from the first node name seen for
	// the token's layer only, so each router decision counts once.
	k := selKey{e.Hdr.Token, uint16(layer)}
	prefix := name[:i]
	if seen, ok := c.selName[k]; !ok {
		c.selName[k] = prefix
	} else if seen != prefix {
		return
	}
	cnt := min(int(e.Count), len(e.Ids))
	if e.N_used > 0 {
		c.selRows[k] += int32(cnt / int(e.N_used))
	}
	for _, id := range e.Ids[:cnt] {
		if id < 0 || id > 0xffff {
			continue
		}
		c.experts[event.ExpertSel{Token: e.Hdr.Token, Layer: uint16(layer), Expert: uint16(id)}]++
	}
}

// picksUnseenCalls are the llama_decode calls that computed tokens (a CPU
// graph ran, or the router's picks were seen, in them) in which a MoE
// layer whose experts lived on the CPU side (or in a buffer not named)
// and that is not unseen run-wide (runWide) got fewer rows of picks than
// the call had tokens: with layers on a GPU, llama.cpp's scheduler
// offloads the MUL_MAT_ID of a large batch (32 tokens in ggml-vulkan and
// ggml-cuda, GGML_OP_OFFLOAD_MIN_BATCH) to the GPU, where no CPU graph
// reads its ids; a ubatch split of the call can leave only some of its
// rows on the CPU. The model's last layer computes only the rows whose
// logits are wanted: one seen row counts it as seen. That is the last
// layer with picks unless a later layer's experts lived on a GPU
// (--n-cpu-moe N), whose CPU layers all compute every row. None in a run
// without picks (rundir.Meta.PicksNA and runWide say why).
func picksUnseenCalls(tensors []event.Tensor, tokens []event.TokenInfo, rows map[selKey]int32, graphed map[uint32]bool, runWide []uint16) []event.PicksUnseenCall {
	if len(rows) == 0 {
		return nil
	}
	last, offload := -1, false
	for k := range rows {
		last = max(last, int(k.layer))
	}
	cpu := map[uint16]bool{}
	gpuAfter := false
	for _, t := range tensors {
		offCPU := t.OffCPU()
		offload = offload || offCPU && !t.Pseudo()
		if t.Experts > 0 && t.Layer >= 0 && t.Layer <= 0xffff && !offCPU && !slices.Contains(runWide, uint16(t.Layer)) {
			cpu[uint16(t.Layer)] = true
		}
		gpuAfter = gpuAfter || t.Experts > 0 && offCPU && t.Layer > last
	}
	if gpuAfter {
		last = -1
	}
	layers := slices.Sorted(maps.Keys(cpu))
	picked := map[uint32]bool{}
	for k := range rows {
		picked[k.token] = true
	}
	var calls []event.PicksUnseenCall
	for _, t := range tokens {
		if t.StartNS == 0 || t.NTokens <= 0 || !graphed[t.Token] && !picked[t.Token] {
			continue
		}
		call := event.PicksUnseenCall{Token: t.Token, Phase: t.Phase, Tokens: t.NTokens, Offload: offload}
		for _, l := range layers {
			n := rows[selKey{t.Token, l}]
			if n >= t.NTokens || int(l) == last && n > 0 {
				continue
			}
			call.Layers = append(call.Layers, event.PicksUnseenLayer{Layer: l, Rows: n})
		}
		if len(call.Layers) > 0 {
			calls = append(calls, call)
		}
	}
	return calls
}

// picksUnseen are the layers with expert tensors and no pick in a run
// that called llama_decode (decoded): in a run with picks, each such
// layer; in one without, the layers whose experts lived in a buffer of
// no CPU (-ngl without --cpu-moe: the GPU ran every router). None in a
// run that decoded nothing; a run whose probe attached nowhere is
// rundir.Meta.PicksNA's case.
func picksUnseen(tensors []event.Tensor, sel []event.ExpertSel, decoded bool) []uint16 {
	if !decoded {
		return nil
	}
	seen := map[int]bool{}
	for _, e := range sel {
		seen[int(e.Layer)] = true
	}
	var unseen []uint16
	for _, t := range tensors {
		offCPU := t.Device != "" && !strings.HasPrefix(t.Device, "CPU")
		if t.Experts > 0 && t.Layer >= 0 && t.Layer <= 0xffff && !seen[t.Layer] && (len(sel) > 0 || offCPU) {
			seen[t.Layer] = true
			unseen = append(unseen, uint16(t.Layer))
		}
	}
	slices.Sort(unseen)
	return unseen
}
