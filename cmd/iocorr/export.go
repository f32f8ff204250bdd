package main

import (
	"bufio"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "export",
		summary: "write a run's per-token, per-token-tensor or per-event data as CSV or JSON",
		usage:   "[-i DIR] faults-per-token|faults-per-token-tensor|events [-o FILE] [--format csv|json|jsonl]",
		flags:   exportFlags,
	})
}

var exportKinds = []string{"faults-per-token", "faults-per-token-tensor", "events"}

func exportFlags(fs *pflag.FlagSet) func(ctx context.Context, args []string) error {
	dir := fs.StringP("input", "i", rundir.Default, "run directory")
	out := fs.StringP("output", "o", "-", "output file (- is stdout)")
	format := fs.String("format", "csv", "csv, json (faults-per-token*) or jsonl (events)")
	return func(ctx context.Context, args []string) error {
		if len(args) == 0 {
			return usagef("export takes one KIND: faults-per-token, faults-per-token-tensor or events")
		}
		kind := args[0]
		// Flags may follow KIND (export events -o FILE): parse the rest.
		if err := fs.Parse(args[1:]); err != nil {
			return usagef("export: %v", err)
		}
		if fs.NArg() > 0 {
			return usagef("export takes one KIND, got also %q", fs.Args())
		}
		switch {
		case !contains(exportKinds, kind):
			return usagef("unknown export %q (want faults-per-token, faults-per-token-tensor or events)", kind)
		case kind != "events" && (*format == "csv" || *format == "json"):
		case kind == "events" && (*format == "csv" || *format == "jsonl"):
		default:
			return usagef("export %s cannot be written as %q", kind, *format)
		}
		st, err := index.Open(*dir)
		if err != nil {
			return err
		}
		defer st.Close()
		w := stdout
		var f *os.File
		if *out != "-" {
			if f, err = os.Create(*out); err != nil {
				return fmt.Errorf("creating export file: %w", err)
			}
			defer f.Close()
			w = f
		}
		bw := bufio.NewWriterSize(w, 1<<20)
		switch kind {
		case "faults-per-token":
			err = exportTokens(ctx, st, bw, outputFormat(*format))
		case "faults-per-token-tensor":
			err = exportTokenTensors(ctx, st, bw, outputFormat(*format))
		default:
			err = exportEvents(ctx, st, bw, *format)
		}
		if err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return fmt.Errorf("writing export: %w", err)
		}
		if f != nil {
			if err := f.Close(); err != nil {
				return fmt.Errorf("writing export: %w", err)
			}
		}
		return nil
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func exportTokens(ctx context.Context, st *index.Store, w io.Writer, format outputFormat) error {
	names := []string{"token", "phase", "n_tokens", "start_ns", "duration_ns", "faults", "major_faults", "minor_faults",
		"unaccounted_faults", "fault_stall_ns", "pages_added", "bytes_added", "readahead_trigger_bytes", "bytes_read",
		"block_requests", "evictions", "bytes_evicted", "tensors_touched", "experts_touched"}
	cols := make([]column, len(names))
	for i, n := range names {
		cols[i] = column{Name: n}
	}
	toks, err := st.Tokens()
	if err != nil {
		return err
	}
	rw := newResultWriter(w, format, cols)
	for _, t := range toks {
		var dur uint64
		if t.EndNS > t.StartNS && t.StartNS != 0 {
			dur = t.EndNS - t.StartNS
		}
		if err := rw.Row(num(t.Token), txt(correlate.PhaseName(t.Phase)), num(t.NTokens), num(t.StartNS), num(dur),
			num(t.Faults), num(t.Major), num(t.Minor), num(t.Unaccounted), num(t.StallNS), num(t.PagesAdded), num(t.AddedBytes),
			num(t.TriggerBytes), num(t.ReadBytes), num(t.BlockReqs), num(t.PagesEvicted), num(t.EvictedBytes),
			num(t.TensorsTouched), num(t.ExpertsTouched)); err != nil {
			return err
		}
	}
	return rw.Close()
}

func exportTokenTensors(ctx context.Context, st *index.Store, w io.Writer, format outputFormat) error {
	names := []string{"token", "phase", "tensor", "layer", "expert", "op", "faults", "major_faults", "minor_faults",
		"unaccounted_faults", "fault_stall_ns", "bytes_added", "readahead_trigger_bytes", "bytes_read", "block_requests", "bytes_evicted"}
	cols := make([]column, len(names))
	for i, n := range names {
		cols[i] = column{Name: n}
	}
	toks, err := st.Tokens()
	if err != nil {
		return err
	}
	phase := map[uint32]uint8{}
	for _, t := range toks {
		phase[t.Token] = t.Phase
	}
	rw := newResultWriter(w, format, cols)
	n := 0
	err = st.Aggs(func(a *correlate.Agg) error {
		if n++; n&0xfff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := &st.Tensors[a.Tensor]
		return rw.Row(num(a.Token), txt(correlate.PhaseName(phase[a.Token])), txt(t.Name), num(t.Layer), num(int(a.Expert)),
			txt(st.OpName(st.OpOf(a.Op, a.Tensor))), num(a.Faults), num(a.Major), num(a.Minor), num(a.Unaccounted), num(a.StallNS),
			num(a.AddedBytes), num(a.TriggerBytes), num(a.ReadBytes), num(a.BlockReqs), num(a.EvictedBytes))
	})
	if err != nil {
		return err
	}
	return rw.Close()
}

// eventJSON is one line of the jsonl events export.
type eventJSON struct {
	Ts      uint64 `json:"ts_ns"`
	Kind    string `json:"kind"`
	Token   uint32 `json:"token"`
	Phase   string `json:"phase"`
	Op      string `json:"op"`
	Tid     uint32 `json:"tid"`
	Tensor  string `json:"tensor"`
	Layer   int    `json:"layer"`
	Expert  int16  `json:"expert"`
	Offset  int64  `json:"offset"`
	Bytes   uint64 `json:"bytes"`
	Dur     uint64 `json:"duration_ns"`
	Class   uint8  `json:"class"`
	Trigger string `json:"trigger_tensor"`
}

func exportEvents(ctx context.Context, st *index.Store, w io.Writer, format string) error {
	var cw *csv.Writer
	var enc *json.Encoder
	if format == "csv" {
		cw = csv.NewWriter(w)
		if err := cw.Write([]string{"ts_ns", "kind", "token", "phase", "op", "tid", "tensor", "layer", "expert", "offset", "bytes", "duration_ns", "class", "trigger_tensor"}); err != nil {
			return err
		}
	} else {
		enc = json.NewEncoder(w)
	}
	rec := make([]string, 14)
	n := 0
	err := st.Events(index.EventFilter{}, func(e *correlate.Event) error {
		if n++; n&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := &st.Tensors[e.Tensor]
		trig := ""
		if e.Trigger != correlate.NoTensor {
			trig = st.TensorName(e.Trigger)
		}
		op := st.OpName(st.OpOf(e.Op, e.Tensor))
		if enc != nil {
			return enc.Encode(eventJSON{Ts: e.Ts, Kind: e.Kind.String(), Token: e.Token, Phase: correlate.PhaseName(e.Phase), Op: op,
				Tid: e.Tid, Tensor: t.Name, Layer: t.Layer, Expert: e.Expert, Offset: e.Offset, Bytes: e.Bytes, Dur: e.Dur, Class: e.Class, Trigger: trig})
		}
		rec[0] = strconv.FormatUint(e.Ts, 10)
		rec[1] = e.Kind.String()
		rec[2] = strconv.FormatUint(uint64(e.Token), 10)
		rec[3] = correlate.PhaseName(e.Phase)
		rec[4] = op
		rec[5] = strconv.FormatUint(uint64(e.Tid), 10)
		rec[6] = t.Name
		rec[7] = strconv.Itoa(t.Layer)
		rec[8] = strconv.Itoa(int(e.Expert))
		rec[9] = strconv.FormatInt(e.Offset, 10)
		rec[10] = strconv.FormatUint(e.Bytes, 10)
		rec[11] = strconv.FormatUint(e.Dur, 10)
		rec[12] = strconv.Itoa(int(e.Class))
		rec[13] = trig
		return cw.Write(rec)
	})
	if err != nil {
		return err
	}
	if cw != nil {
		cw.Flush()
		return cw.Error()
	}
	return nil
}
