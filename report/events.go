package report

import (
	"fmt"
	"math"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/internal/kernel"
	"github.com/iocorr/iocorr/store"
)

// events is the one pass over the run's events, binned for drawing.
type events struct {
	tensors  []event.Tensor
	model    int   // the model file the heatmaps show, -1 when none
	lo, hi   int64 // its tensor bytes
	rowBytes int64
	rows     int
	cols     int
	maxTok   uint32
	bytes    [][]float64 // [col][row] device bytes read
	faults   [][]float64 // [col][row] major faults
	// Whole-run totals by tensor id, for hover text.
	tBytes, tFaults []float64
	late            int // events of a token after maxTok, not in the heatmaps
	// expBytes is the device bytes read of each (layer, expert) slice of
	// the *_exps tensors in decode tokens.
	expBytes map[[2]int]float64
}

func (e *events) col(tok uint32) int {
	return min(int(uint64(tok)*uint64(e.cols)/(uint64(e.maxTok)+1)), e.cols-1)
}

// eventPass reads the run's events once, into the offset heatmaps' cells,
// the whole-run totals of each tensor and the decode bytes of each expert
// slice.
func (r *run) eventPass() (*events, error) {
	ev := r.newEvents()
	err := r.Store.Events(store.EventFilter{}, func(e *event.Event) error {
		if e.Tensor < event.FirstTensor || int(e.Tensor) >= len(r.Store.Tensors) {
			return nil
		}
		ev.add(e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading events: %w", err)
	}
	return ev, nil
}

// newEvents lays out the empty bins: the drawn model's tensor bytes cut
// into at most HeatRows rows of whole pages, the tokens into at most
// HeatTokens columns.
func (r *run) newEvents() *events {
	ev := &events{tensors: r.Store.Tensors, model: r.drawnModel(), expBytes: map[[2]int]float64{},
		tBytes: make([]float64, len(r.Store.Tensors)), tFaults: make([]float64, len(r.Store.Tensors))}
	ev.lo, ev.hi = math.MaxInt64, 0
	for i := range r.Store.Tensors {
		if t := &r.Store.Tensors[i]; !t.Pseudo() && t.Model == ev.model {
			ev.lo, ev.hi = min(ev.lo, t.Offset), max(ev.hi, t.Offset+t.Size)
		}
	}
	if ev.model < 0 || ev.hi <= ev.lo {
		ev.lo, ev.hi = 0, 1
	}
	pages := (ev.hi - ev.lo + kernel.PageSize - 1) / kernel.PageSize
	ev.rows = int(min(int64(HeatRows), max(pages, 1)))
	ev.rowBytes = (ev.hi - ev.lo + int64(ev.rows) - 1) / int64(ev.rows)
	for _, t := range r.tokens {
		ev.maxTok = max(ev.maxTok, t.Token)
	}
	// Events after the last call carry its token; none carries a later one.
	ev.cols = min(int(ev.maxTok)+1, HeatTokens)
	ev.bytes = grid(ev.cols, ev.rows)
	ev.faults = grid(ev.cols, ev.rows)
	return ev
}

// drawnModel is the model file the offset heatmaps show: the one with the
// most tensors (llama.cpp runs load one), -1 when there is none.
func (r *run) drawnModel() int {
	model := -1
	count := map[int]int{}
	for i := range r.Store.Tensors {
		if t := &r.Store.Tensors[i]; !t.Pseudo() && t.Model >= 0 {
			count[t.Model]++
		}
	}
	for m, n := range count {
		if model < 0 || n > count[model] || (n == count[model] && m < model) {
			model = m
		}
	}
	return model
}

// add bins one event of a real tensor.
func (ev *events) add(e *event.Event) {
	t := &ev.tensors[e.Tensor]
	if e.Token > ev.maxTok && t.Model == ev.model && (e.Kind == event.KindBlock || e.Kind == event.KindFault) {
		ev.late++
	}
	switch {
	case e.Kind == event.KindBlock && event.BlockRead(e.Class):
		ev.tBytes[e.Tensor] += float64(e.Bytes)
		if t.Experts > 0 && t.ExpertStride > 0 && t.Layer >= 0 && e.Phase == event.PhaseDecode {
			ev.addExpertBytes(t, e)
		}
		if off, ok := ev.drawnOffset(e); ok {
			ev.addRowBytes(ev.col(e.Token), off, off+int64(e.Bytes))
		}
	case e.Kind == event.KindFault && e.Class == event.ClassMajor:
		ev.tFaults[e.Tensor]++
		if off, ok := ev.drawnOffset(e); ok {
			if row := (off - ev.lo) / ev.rowBytes; row >= 0 && row < int64(ev.rows) {
				ev.faults[ev.col(e.Token)][row]++
			}
		}
	}
}

// drawnOffset is e's offset in the drawn model file, when e is in one of
// the heatmaps' columns.
func (ev *events) drawnOffset(e *event.Event) (int64, bool) {
	m, off, ok := event.FileOffset(ev.tensors, e)
	return off, ok && m == ev.model && e.Token <= ev.maxTok
}

// addExpertBytes adds a decode read of an *_exps tensor to the expert
// slices it covers: a read may cross from one expert into the next.
func (ev *events) addExpertBytes(t *event.Tensor, e *event.Event) {
	for o, end := e.Offset, e.Offset+int64(e.Bytes); o < end; {
		x := o / t.ExpertStride
		next := min(end, (x+1)*t.ExpertStride)
		ev.expBytes[[2]int{t.Layer, int(x)}] += float64(next - o)
		o = next
	}
}

// addRowBytes adds the file bytes [o, end) to column c's rows.
func (ev *events) addRowBytes(c int, o, end int64) {
	for o < end {
		row := (o - ev.lo) / ev.rowBytes
		next := min(end, ev.lo+(row+1)*ev.rowBytes)
		if row >= 0 && row < int64(ev.rows) {
			ev.bytes[c][row] += float64(next - o)
		}
		o = next
	}
}
