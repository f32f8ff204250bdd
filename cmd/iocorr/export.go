package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

func init() {
	register(&command{
		name:    "export",
		summary: "write a run's per-token, per-token-tensor or per-event data as CSV, JSON, JSON lines or a table",
		usage:   "[-i DIR] faults-per-token|faults-per-token-tensor|events|stats|sweep|perfetto [-o FILE|DIR] [--format csv|json|jsonl|table|parquet] [--table NAME] [event filters]",
		flags:   exportFlags,
	})
}

var exportKinds = []string{"faults-per-token", "faults-per-token-tensor", "events"}

func exportFlags(fs *pflag.FlagSet) func(ctx context.Context, args []string) error {
	dir := fs.StringP("input", "i", rundir.Default, "run directory")
	out := fs.StringP("output", "o", "-", "output file (- is stdout); written aside and renamed when complete")
	format := fileFormatFlag(fs, formatCSV)
	tensor := fs.String("tensor", "", "events: only of tensor NAME or glob")
	token := fs.String("token", "", "events: only of token N or range A-B")
	layer := fs.Int("layer", -1, "events: only of tensors of layer L")
	expert := fs.Int("expert", -1, "events: only of expert E")
	op := fs.String("op", "", "events: only of op NAME")
	table := fs.String("table", "", "stats: only table NAME (required unless --format parquet, which writes every table into the directory -o)")
	return func(ctx context.Context, args []string) error {
		if len(args) == 0 {
			return usagef("export: want one KIND: %s", strings.Join(exportKinds, ", "))
		}
		kind := args[0]
		// Flags may follow KIND (export events -o FILE): parse the rest.
		if err := fs.Parse(args[1:]); err != nil {
			return usagef("export: %v", err)
		}
		if fs.NArg() > 0 {
			return usagef("export: want one KIND, got also %q", fs.Args())
		}
		if !contains(exportKinds, kind) && kind != "sweep" && kind != "stats" && kind != "perfetto" {
			return usagef("export: unknown kind %q (want %s, stats, sweep or perfetto)", kind, strings.Join(exportKinds, ", "))
		}
		if fs.Changed("table") && kind != "stats" {
			return usagef("export: --table names a table of stats")
		}
		if *format == formatParquet && (*out == "-" || *out == "") {
			return usagef("export: parquet is binary: give -o FILE")
		}
		filtered := false
		for _, f := range []string{"tensor", "token", "layer", "expert", "op"} {
			filtered = filtered || fs.Changed(f)
		}
		if filtered && kind != "events" {
			return usagef("export: --tensor, --token, --layer, --expert and --op select events; %s is whole-run", kind)
		}
		if kind == "stats" {
			return exportStats(*dir, *out, *table, *format)
		}
		if kind == "perfetto" {
			return exportPerfetto(*dir, *out, fs.Changed("format"))
		}
		if kind == "sweep" {
			// -i is a sweep directory: its summary (sweep.json).
			sum, err := sweep.ReadSummary(*dir)
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			return writeExport(*out, func(w io.Writer) error { return writeSweepRows(w, *format, sum.Rows) })
		}
		st, status, err := openRun(*dir)
		if err != nil {
			return fmt.Errorf("export: %w", err)
		}
		defer st.Close()
		var filter index.EventFilter
		if kind == "events" {
			if filter, err = eventFilter(fs, st, *tensor, *token, *layer, *expert, *op); err != nil {
				return err
			}
		}
		return writeExport(*out, func(w io.Writer) error {
			switch kind {
			case "faults-per-token":
				return exportTokens(ctx, st, w, *format, status)
			case "faults-per-token-tensor":
				return exportTokenTensors(ctx, st, w, *format, status)
			}
			return exportEvents(ctx, st, w, *format, status, filter)
		})
	}
}

// eventFilter turns the export's filter flags into an index.EventFilter.
func eventFilter(fs *pflag.FlagSet, st *index.Store, tensor, token string, layer, expert int, op string) (index.EventFilter, error) {
	var f index.EventFilter
	var err error
	var lp *int
	if fs.Changed("layer") {
		lp = &layer
		f.Layers = map[int]bool{layer: true}
	}
	if tensor != "" || lp != nil {
		// Also checks that the layer exists; --layer alone then reads the
		// layer index rather than every tensor's of the layer.
		ids, err := st.MatchTensors(tensor, lp, true)
		if err != nil {
			return f, fmt.Errorf("export: %w", err)
		}
		if tensor != "" {
			f.Tensors = ids
		}
	}
	if fs.Changed("token") {
		if f.Tokens, err = parseTokenRange(token); err != nil {
			return f, usagef("export: %v", err)
		}
	}
	if fs.Changed("expert") {
		if expert < -1 || expert > 0x7ffe {
			return f, usagef("export: --expert %d out of range (-1 selects dense tensors)", expert)
		}
		f.Experts = map[int16]bool{int16(expert): true}
	}
	if op != "" {
		if f.Ops, err = st.OpIDs(op); err != nil {
			return f, fmt.Errorf("export: %w", err)
		}
	}
	return f, nil
}

// writeExport runs write on stdout, or on a temporary file beside out that
// becomes out only when write succeeded: a failed or interrupted export
// never leaves a truncated file that looks complete.
func writeExport(out string, write func(io.Writer) error) error {
	if out == "-" {
		bw := bufio.NewWriterSize(stdout, 1<<20)
		if err := write(bw); err != nil {
			return fmt.Errorf("export: %w", err)
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("export: writing: %w", err)
		}
		return nil
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	tmp := f.Name()
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		os.Chmod(tmp, 0o644)
		err = os.Rename(tmp, out)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("export: writing %s: %w", out, err)
	}
	return nil
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// Exports carry every counter (event.CounterFields) under its name,
// whatever the format.
func exportTokens(ctx context.Context, st *index.Store, w io.Writer, format outputFormat, status string) error {
	cols := []typedColumn{{"token", typUint32, false}, {"phase", typString, false}, {"n_tokens", typInt32, false},
		{"start_ns", typUint64, true}, {"duration_ns", typUint64, true}}
	cols = append(counterTypedColumns(cols), typedColumn{"tensors_touched", typUint32, false}, typedColumn{"experts_touched", typUint32, false})
	rw := newRowWriter(w, format, cols)
	rw.SetStatus(status)
	cells := make([]cell, 0, len(cols))
	err := st.EachToken(func(t *event.TokenInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A token whose llama_decode entry or return was not seen (token
		// 0, a lost record) has no start or duration: NA, not 0.
		start, dur := naCell(), naCell()
		if t.StartNS != 0 {
			start = num(t.StartNS)
			if t.EndNS >= t.StartNS {
				dur = durCell(t.EndNS - t.StartNS)
			}
		}
		cells = append(cells[:0], num(t.Token), txt(event.PhaseName(t.Phase)), num(t.NTokens), start, dur)
		cells = counterCells(cells, &t.Counters, false)
		cells = append(cells, num(t.TensorsTouched), num(t.ExpertsTouched))
		return rw.Row(cells...)
	})
	if err != nil {
		return err
	}
	return rw.Close()
}

func exportTokenTensors(ctx context.Context, st *index.Store, w io.Writer, format outputFormat, status string) error {
	cols := counterTypedColumns([]typedColumn{{"token", typUint32, false}, {"phase", typString, false}, {"tensor", typString, false},
		{"layer", typInt32, false}, {"expert", typInt32, false}, {"op", typString, false}})
	rw := newRowWriter(w, format, cols)
	rw.SetStatus(status)
	// Phases per token: a run has thousands of tokens, not millions.
	phase := map[uint32]uint8{}
	if err := st.EachToken(func(t *event.TokenInfo) error {
		phase[t.Token] = t.Phase
		return nil
	}); err != nil {
		return err
	}
	cells := make([]cell, 0, len(cols))
	n := 0
	err := st.Aggs(func(a *event.Agg) error {
		if n++; n&0xfff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := st.Tensor(a.Tensor)
		// The op is the one of the graph node reading the weight.
		cells = append(cells[:0], num(a.Token), txt(event.PhaseName(phase[a.Token])), txt(t.Name), num(t.Layer),
			num(a.Expert), txt(st.OpName(t.Op)))
		cells = counterCells(cells, &a.Counters, false)
		return rw.Row(cells...)
	})
	if err != nil {
		return err
	}
	return rw.Close()
}

// eventColumns are an events export's columns. Strings that do not apply
// (the class of a page-cache event, the trigger of a fault) are empty, as
// in CSV and JSON; only unmeasured numbers are NA.
var eventColumns = []typedColumn{{"ts_ns", typUint64, false}, {"kind", typString, false}, {"class", typString, false},
	{"token", typUint32, false}, {"phase", typString, false}, {"op", typString, false}, {"tid", typUint32, false},
	{"tensor", typString, false}, {"layer", typInt32, false}, {"expert", typInt32, false}, {"offset", typInt64, false},
	{"bytes", typUint64, false}, {"duration_ns", typUint64, false}, {"trigger_tensor", typString, false}}

// counterTypedColumns appends every counter (event.CounterFields) as
// an unsigned 64-bit column: counters are always measured, never NA.
func counterTypedColumns(dst []typedColumn) []typedColumn {
	for _, c := range counterColumns(nil, false) {
		dst = append(dst, typedColumn{c.Name, typUint64, false})
	}
	return dst
}

func exportEvents(ctx context.Context, st *index.Store, w io.Writer, format outputFormat, status string, f index.EventFilter) error {
	rw := newRowWriter(w, format, eventColumns)
	rw.SetStatus(status)
	cells := make([]cell, 0, 14)
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
		cells = append(cells[:0], num(e.Ts), txt(e.Kind.String()), txt(e.ClassName()), num(e.Token), txt(event.PhaseName(e.Phase)),
			txt(st.OpName(st.OpOf(e.Op, e.Tensor))), num(e.Tid), txt(t.Name), num(t.Layer), num(e.Expert),
			num(e.Offset), bytesCell(e.Bytes), durCell(e.Dur), txt(trig))
		return rw.Row(cells...)
	})
	if err != nil {
		return err
	}
	return rw.Close()
}
