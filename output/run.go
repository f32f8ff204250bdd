package output

import (
	"context"
	"io"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/store"
)

// QueryRows writes the rows of store.Store.Query grouped by by. A table
// shows what a person reads first (event.Counter.Table); the other
// formats carry every counter as a raw number. Columns are the counters'
// names everywhere. A layer, expert or request key is an integer, null
// for none; a pseudo tensor's row (query --all) has a null key and its
// name in the PseudoTensor column, which only such a result has; a pseudo
// request's ("shared", "[unknown]", ...) has its name in PseudoRequest,
// which a query by request always has.
// What the run did not measure (na: its counters, and for a query by
// expert the router's picks) is left out, or NA, never a count of zero.
func QueryRows(w io.Writer, rows []store.Row, by string, format Format, status string, na *Unmeasured) error {
	return QueryRowsWith(w, rows, by, format, status, na, nil)
}

// QueryRowsWith is QueryRows whose rows by token carry figs beside their
// counters (nil: none).
func QueryRowsWith(w io.Writer, rows []store.Row, by string, format Format, status string, na *Unmeasured, figs *TokenFigures) error {
	if by != "token" && by != "" {
		figs = nil
	}
	if by == "" {
		by = "token"
	}
	tableOnly := format == Table
	cols := []Column{{Name: by, Type: String}}
	intKey, pseudoCol := IntKey(by)
	pseudo := by == "request" || intKey && anyPseudo(len(rows), func(i int) string { return rows[i].Key })
	switch {
	case by == "token":
		cols = []Column{{Name: by, Type: Uint32}, {Name: "phase", Type: String}}
	case intKey:
		cols[0] = Column{Name: by, Type: Int32, Nullable: true}
		if pseudo {
			cols = append(cols, Column{Name: pseudoCol, Type: String, Nullable: true})
		}
	}
	// Where each layer's weights lived (store.Row.Devices); a pseudo
	// tensor's row, which holds none, has none.
	devices := by == "layer"
	if devices {
		cols = append(cols, Column{Name: "devices", Type: String, Nullable: pseudo})
	}
	selected := false
	if by == "expert" {
		keep, unmeasured := na.keeps(store.Selected)
		if selected = keep; keep {
			cols = append(cols, Column{Name: store.Selected, Type: Uint64, Nullable: unmeasured})
		}
	}
	cols = figs.columns(CounterColumns(cols, tableOnly, na))
	rw := New(w, format, cols)
	rw.SetStatus(status)
	NoteNA(rw, na)
	figs.set(rw)
	cells := make([]Cell, 0, len(cols))
	for _, r := range rows {
		cells = append(cells[:0], Text(r.Key))
		switch {
		case by == "token":
			cells[0] = Num(r.Token)
			cells = append(cells, Text(event.PhaseName(r.Phase)))
		case intKey:
			key, name := Key(r.Key)
			cells[0] = key
			if pseudo {
				cells = append(cells, name)
			}
		}
		if devices {
			if r.Devices == "" {
				cells = append(cells, None())
			} else {
				cells = append(cells, Text(r.Devices))
			}
		}
		if selected {
			if na.reason(store.Selected) != "" {
				cells = append(cells, NA())
			} else {
				cells = append(cells, Num(r.Selected))
			}
		}
		cells = figs.cells(CounterCells(cells, &r.Counters, tableOnly, na), r.Token, format)
		if err := rw.Row(cells...); err != nil {
			return err
		}
	}
	return rw.Close()
}

// The exports below carry every counter (event.CounterFields) under its
// name, whatever the format.

// Tokens writes a row per token of the run in st; the counters in na
// were not measured.
func Tokens(ctx context.Context, st *store.Store, w io.Writer, format Format, status string, na *Unmeasured) error {
	return TokensWith(ctx, st, w, format, status, na, nil)
}

// TokensWith is Tokens whose rows carry figs after the touched counts
// (nil: none).
func TokensWith(ctx context.Context, st *store.Store, w io.Writer, format Format, status string, na *Unmeasured, figs *TokenFigures) error {
	cols := []Column{{"token", Uint32, false}, {"phase", String, false}, {"n_tokens", Int32, false},
		{"request", Int32, true}, {PseudoRequest, String, true}, {"start_ns", Uint64, true}, {"duration_ns", Uint64, true}}
	cols = append(CounterColumns(cols, false, na), Column{"tensors_touched", Uint32, false}, Column{"experts_touched", Uint32, false})
	cols = figs.columns(cols)
	rw := New(w, format, cols)
	rw.SetStatus(status)
	NoteNA(rw, na)
	figs.set(rw)
	cells := make([]Cell, 0, len(cols))
	err := st.EachToken(func(t *event.TokenInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A token whose llama_decode entry or return was not seen (token
		// 0, a lost record) has no start or duration: NA, not 0.
		start, dur := NA(), NA()
		if t.StartNS != 0 {
			start = Num(t.StartNS)
			if t.EndNS >= t.StartNS {
				dur = Duration(t.EndNS - t.StartNS)
			}
		}
		// The request: the token's llama.cpp sequence, or null and the
		// pseudo request of event.TokenInfo.Request ("shared",
		// "[unknown]"...).
		req, pseudo := Key(t.Request())
		cells = append(cells[:0], Num(t.Token), Text(event.PhaseName(t.Phase)), Num(t.NTokens), req, pseudo, start, dur)
		cells = CounterCells(cells, &t.Counters, false, na)
		cells = append(cells, Num(t.TensorsTouched), Num(t.ExpertsTouched))
		return rw.Row(figs.cells(cells, t.Token, format)...)
	})
	if err != nil {
		return err
	}
	return rw.Close()
}

// TokenTensors writes a row per token and tensor (and expert) the token
// touched; the counters in na were not measured. A tensor of no layer
// has a null layer, a dense tensor a null expert.
func TokenTensors(ctx context.Context, st *store.Store, w io.Writer, format Format, status string, na *Unmeasured) error {
	cols := CounterColumns([]Column{{"token", Uint32, false}, {"phase", String, false}, {"tensor", String, false},
		{"layer", Int32, true}, {"expert", Int32, true}, {"op", String, true}, {"device", String, true}}, false, na)
	rw := New(w, format, cols)
	rw.SetStatus(status)
	NoteNA(rw, na)
	// Phases per token: a run has thousands of tokens, not millions.
	phase := map[uint32]uint8{}
	if err := st.EachToken(func(t *event.TokenInfo) error {
		phase[t.Token] = t.Phase
		return nil
	}); err != nil {
		return err
	}
	cells := make([]Cell, 0, len(cols))
	n := 0
	err := st.Aggs(func(a *event.Agg) error {
		if n++; n&0xfff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := st.Tensor(a.Tensor)
		// The op is the one of the graph node reading the weight.
		cells = append(cells[:0], Num(a.Token), Text(event.PhaseName(phase[a.Token])), Text(t.Name), KeyOf(t.Layer),
			KeyOf(a.Expert), OptText(st.OpName(t.Op)), OptText(t.DeviceName()))
		cells = CounterCells(cells, &a.Counters, false, na)
		return rw.Row(cells...)
	})
	if err != nil {
		return err
	}
	return rw.Close()
}

// eventColumns are an events export's columns. Strings that do not apply
// (the class of a page-cache event, the trigger of a fault, an op or
// device not known) are null (OptText), so that every reader finds the
// same NULL; unmeasured numbers are NA, and a layer or expert that is
// none (a tensor of no layer, a dense tensor) null.
var eventColumns = []Column{{"ts_ns", Uint64, false}, {"kind", String, false}, {"class", String, true},
	{"token", Uint32, false}, {"phase", String, false}, {"op", String, true}, {"tid", Uint32, false},
	{"tensor", String, false}, {"layer", Int32, true}, {"expert", Int32, true}, {"offset", Int64, false},
	{"bytes", Uint64, false}, {"duration_ns", Uint64, true}, {"trigger_tensor", String, true}, {"device", String, true}}

// Events writes a row per attributed event that f selects.
func Events(ctx context.Context, st *store.Store, w io.Writer, format Format, status string, f store.EventFilter) error {
	rw := New(w, format, eventColumns)
	rw.SetStatus(status)
	cells := make([]Cell, 0, len(eventColumns))
	n := 0
	err := st.Events(f, func(e *event.Event) error {
		if n++; n&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := st.Tensor(e.Tensor)
		trig := ""
		if e.Trigger != event.NoTensor {
			trig = st.TensorName(e.Trigger)
		}
		dur := Duration(e.Dur)
		if e.CompletionUnseen() { // no latency measured, not a zero one
			dur = NA()
		}
		cells = append(cells[:0], Num(e.Ts), Text(e.Kind.String()), OptText(e.ClassName()), Num(e.Token), Text(event.PhaseName(e.Phase)),
			OptText(st.OpName(st.OpOf(e.Op, e.Tensor))), Num(e.Tid), Text(t.Name), KeyOf(t.Layer), KeyOf(e.Expert),
			Num(e.Offset), Bytes(e.Bytes), dur, OptText(trig), OptText(t.DeviceName()))
		return rw.Row(cells...)
	})
	if err != nil {
		return err
	}
	return rw.Close()
}
