package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "export",
		summary: "write a run's per-token, per-token-tensor or per-event data as CSV, JSON or JSON lines",
		usage:   "[-i DIR] faults-per-token|faults-per-token-tensor|events [-o FILE] [--format csv|json|jsonl] [event filters]",
		flags:   exportFlags,
	})
}

var exportKinds = []string{"faults-per-token", "faults-per-token-tensor", "events"}

var exportFormats = []string{"csv", "json", "jsonl"}

func exportFlags(fs *pflag.FlagSet) func(ctx context.Context, args []string) error {
	dir := fs.StringP("input", "i", rundir.Default, "run directory")
	out := fs.StringP("output", "o", "-", "output file (- is stdout); written aside and renamed when complete")
	format := fs.String("format", "csv", "csv (RFC 4180), json (one array) or jsonl (an object per line)")
	tensor := fs.String("tensor", "", "events: only of tensor NAME or glob")
	token := fs.String("token", "", "events: only of token N or range A-B")
	layer := fs.Int("layer", -1, "events: only of tensors of layer L")
	expert := fs.Int("expert", -1, "events: only of expert E")
	op := fs.String("op", "", "events: only of op NAME")
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
		if !contains(exportKinds, kind) {
			return usagef("export: unknown kind %q (want %s)", kind, strings.Join(exportKinds, ", "))
		}
		if !contains(exportFormats, *format) {
			return usagef("export: unknown format %q (want %s)", *format, strings.Join(exportFormats, ", "))
		}
		filtered := false
		for _, f := range []string{"tensor", "token", "layer", "expert", "op"} {
			filtered = filtered || fs.Changed(f)
		}
		if filtered && kind != "events" {
			return usagef("export: --tensor, --token, --layer, --expert and --op select events; %s is whole-run", kind)
		}
		st, err := index.Open(*dir)
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
			ew := newExportWriter(w, *format)
			switch kind {
			case "faults-per-token":
				return exportTokens(ctx, st, ew)
			case "faults-per-token-tensor":
				return exportTokenTensors(ctx, st, ew)
			}
			return exportEvents(ctx, st, ew, filter)
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
		if f.Tensors, err = st.MatchTensors(tensor, lp, true); err != nil {
			return f, fmt.Errorf("export: %w", err)
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

// val is one field of an export row: text or a number, without boxing in
// an interface, so a ten-million-event export does not allocate per field.
type val struct {
	s     string
	n     int64
	u     uint64
	kind  byte // 's', 'i' or 'u'
	empty bool // a number that does not apply: empty in CSV, null in JSON
}

func vs(s string) val   { return val{s: s, kind: 's'} }
func vu(u uint64) val   { return val{u: u, kind: 'u'} }
func vi(n int64) val    { return val{n: n, kind: 'i'} }
func vnone() val        { return val{kind: 'u', empty: true} }
func vu32(u uint32) val { return vu(uint64(u)) }

// exportWriter streams rows as CSV (RFC 4180: CRLF line ends, fields with
// a comma, quote or line break quoted), a JSON array of objects, or JSON
// lines. Columns keep their order in JSON objects too.
type exportWriter struct {
	w      io.Writer
	format string
	cols   []string
	n      int
	buf    []byte
}

func newExportWriter(w io.Writer, format string) *exportWriter {
	return &exportWriter{w: w, format: format}
}

func (e *exportWriter) header(cols ...string) error {
	e.cols = cols
	if e.format != "csv" {
		return nil
	}
	e.buf = e.buf[:0]
	for i, c := range cols {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.buf = appendCSVField(e.buf, c)
	}
	e.buf = append(e.buf, '\r', '\n')
	_, err := e.w.Write(e.buf)
	return err
}

func (e *exportWriter) row(vals ...val) error {
	if len(vals) != len(e.cols) {
		return fmt.Errorf("internal: row of %d fields, want %d", len(vals), len(e.cols))
	}
	b := e.buf[:0]
	switch e.format {
	case "csv":
		for i, v := range vals {
			if i > 0 {
				b = append(b, ',')
			}
			switch {
			case v.empty:
			case v.kind == 's':
				b = appendCSVField(b, v.s)
			case v.kind == 'i':
				b = strconv.AppendInt(b, v.n, 10)
			default:
				b = strconv.AppendUint(b, v.u, 10)
			}
		}
		b = append(b, '\r', '\n')
	default:
		if e.format == "json" {
			if e.n == 0 {
				b = append(b, "[\n"...)
			} else {
				b = append(b, ",\n"...)
			}
		}
		b = append(b, '{')
		for i, v := range vals {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, e.cols[i])
			b = append(b, ':')
			switch {
			case v.empty:
				b = append(b, "null"...)
			case v.kind == 's':
				b = appendJSONString(b, v.s)
			case v.kind == 'i':
				b = strconv.AppendInt(b, v.n, 10)
			default:
				b = strconv.AppendUint(b, v.u, 10)
			}
		}
		b = append(b, '}')
		if e.format == "jsonl" {
			b = append(b, '\n')
		}
	}
	e.buf = b
	e.n++
	_, err := e.w.Write(b)
	return err
}

func (e *exportWriter) close() error {
	if e.format != "json" {
		return nil
	}
	end := "\n]\n"
	if e.n == 0 {
		end = "[]\n"
	}
	_, err := io.WriteString(e.w, end)
	return err
}

func appendCSVField(b []byte, s string) []byte {
	if !strings.ContainsAny(s, ",\"\r\n") && (s == "" || (s[0] != ' ' && s[0] != '\t')) {
		return append(b, s...)
	}
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(b, '"')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

func appendJSONString(b []byte, s string) []byte {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// counterVals appends a row's counters in the export's column order.
func counterVals(dst []val, c *correlate.Counters) []val {
	return append(dst, vu(c.Faults), vu(c.Major), vu(c.Minor), vu(c.Unaccounted), vu(c.StallNS), vu(c.PagesAdded),
		vu(c.AddedBytes), vu(c.TriggerBytes), vu(c.ReadBytes), vu(c.BlockReqs), vu(c.PagesEvicted), vu(c.EvictedBytes))
}

var counterCols = []string{"faults", "major_faults", "minor_faults", "unaccounted_faults", "fault_stall_ns", "pages_added",
	"bytes_added", "readahead_trigger_bytes", "bytes_read", "block_requests", "evictions", "bytes_evicted"}

func exportTokens(ctx context.Context, st *index.Store, ew *exportWriter) error {
	cols := append([]string{"token", "phase", "n_tokens", "start_ns", "duration_ns"}, counterCols...)
	if err := ew.header(append(cols, "tensors_touched", "experts_touched")...); err != nil {
		return err
	}
	vals := make([]val, 0, len(cols)+2)
	err := st.EachToken(func(t *correlate.TokenInfo) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		// A token whose llama_decode entry or return was not seen (token
		// 0, a lost record) has no start or duration: empty, not 0.
		start, dur := vnone(), vnone()
		if t.StartNS != 0 {
			start = vu(t.StartNS)
			if t.EndNS >= t.StartNS {
				dur = vu(t.EndNS - t.StartNS)
			}
		}
		vals = append(vals[:0], vu32(t.Token), vs(correlate.PhaseName(t.Phase)), vi(int64(t.NTokens)), start, dur)
		vals = counterVals(vals, &t.Counters)
		vals = append(vals, vu32(t.TensorsTouched), vu32(t.ExpertsTouched))
		return ew.row(vals...)
	})
	if err != nil {
		return err
	}
	return ew.close()
}

func exportTokenTensors(ctx context.Context, st *index.Store, ew *exportWriter) error {
	cols := append([]string{"token", "phase", "tensor", "layer", "expert", "op"}, counterCols...)
	if err := ew.header(cols...); err != nil {
		return err
	}
	// Phases per token: a run has thousands of tokens, not millions.
	phase := map[uint32]uint8{}
	if err := st.EachToken(func(t *correlate.TokenInfo) error {
		phase[t.Token] = t.Phase
		return nil
	}); err != nil {
		return err
	}
	vals := make([]val, 0, len(cols))
	n := 0
	err := st.Aggs(func(a *correlate.Agg) error {
		if n++; n&0xfff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := st.Tensor(a.Tensor)
		// The op is the one of the graph node reading the weight.
		vals = append(vals[:0], vu32(a.Token), vs(correlate.PhaseName(phase[a.Token])), vs(t.Name), vi(int64(t.Layer)),
			vi(int64(a.Expert)), vs(st.OpName(t.Op)))
		vals = counterVals(vals, &a.Counters)
		return ew.row(vals...)
	})
	if err != nil {
		return err
	}
	return ew.close()
}

// eventClass names an event's class: the fault class, read or write for
// block requests, nothing for page-cache events.
func eventClass(e *correlate.Event) string {
	switch e.Kind {
	case correlate.KindFault:
		switch e.Class {
		case 0:
			return "minor"
		case 1:
			return "major"
		}
		return "unaccounted"
	case correlate.KindBlock:
		if e.Class == 0 {
			return "read"
		}
		return "write"
	}
	return ""
}

func exportEvents(ctx context.Context, st *index.Store, ew *exportWriter, f index.EventFilter) error {
	if err := ew.header("ts_ns", "kind", "class", "token", "phase", "op", "tid", "tensor", "layer", "expert", "offset",
		"bytes", "duration_ns", "trigger_tensor"); err != nil {
		return err
	}
	vals := make([]val, 0, 14)
	n := 0
	err := st.Events(f, func(e *correlate.Event) error {
		if n++; n&0xffff == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		t := st.Tensor(e.Tensor)
		trig := ""
		if e.Trigger != correlate.NoTensor {
			trig = st.TensorName(e.Trigger)
		}
		vals = append(vals[:0], vu(e.Ts), vs(e.Kind.String()), vs(eventClass(e)), vu32(e.Token), vs(correlate.PhaseName(e.Phase)),
			vs(st.OpName(st.OpOf(e.Op, e.Tensor))), vu32(e.Tid), vs(t.Name), vi(int64(t.Layer)), vi(int64(e.Expert)),
			vi(e.Offset), vu(e.Bytes), vu(e.Dur), vs(trig))
		return ew.row(vals...)
	})
	if err != nil {
		return err
	}
	return ew.close()
}
