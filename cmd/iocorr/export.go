package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/dataset"
	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/sweep"
)

func init() {
	register(&command{
		name:    "export",
		summary: "write a run's per-token, per-token-tensor or per-event data as CSV, JSON, JSON lines, Parquet or a table, or add the run to a study's Parquet dataset (dataset -o DIR)",
		usage:   "[-i DIR] faults-per-token|faults-per-token-tensor|events|stats|sweep|perfetto|dataset [-o FILE|DIR] [--format csv|json|jsonl|table|parquet] [--all-columns] [--table NAME] [event filters]",
		flags:   exportFlags,
		man:     exportManual,
	})
}

var exportKinds = []string{"faults-per-token", "faults-per-token-tensor", "events"}

// exportOptions are export's flags.
type exportOptions struct {
	dir, out, table string
	format          *output.Format
	// The event filters, with fs.Changed telling a flag given from its
	// default.
	tensor, token, op string
	layer, expert     int
	allColumns        bool
}

func exportFlags(fs *pflag.FlagSet) func(ctx context.Context, args []string) error {
	var o exportOptions
	fs.StringVarP(&o.dir, "input", "i", rundir.Default, "run directory")
	fs.StringVarP(&o.out, "output", "o", "-", "output file (- is stdout; dataset: the dataset's directory); written aside and renamed when complete, NAME.na.json beside it says why columns are NA")
	o.format = fileFormatFlag(fs, output.CSV)
	fs.StringVar(&o.tensor, "tensor", "", "events: only of tensor NAME or glob")
	fs.StringVar(&o.token, "token", "", "events: only of token N or range A-B")
	fs.IntVar(&o.layer, "layer", -1, "events: only of tensors of layer L")
	fs.IntVar(&o.expert, "expert", -1, "events: only of expert E")
	fs.StringVar(&o.op, "op", "", "events: only of op NAME")
	fs.BoolVar(&o.allColumns, "all-columns", false, "keep the columns the run did not measure (NA in every row) rather than leave them out")
	fs.StringVar(&o.table, "table", "", "stats: only table NAME (required unless --format parquet, which writes every table into the directory -o)")
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
		if !slices.Contains(exportKinds, kind) && kind != "sweep" && kind != "stats" && kind != "perfetto" && kind != "dataset" {
			return usagef("export: unknown kind %q (want %s, stats, sweep, perfetto or dataset)", kind, strings.Join(exportKinds, ", "))
		}
		if fs.Changed("table") && kind != "stats" {
			return usagef("export: --table names a table of stats")
		}
		if *o.format == output.Parquet && (o.out == "-" || o.out == "") {
			return usagef("export: parquet is binary: give -o FILE")
		}
		filtered := false
		for _, f := range []string{"tensor", "token", "layer", "expert", "op"} {
			filtered = filtered || fs.Changed(f)
		}
		if filtered && kind != "events" {
			return usagef("export: --tensor, --token, --layer, --expert and --op select events; %s is whole-run", kind)
		}
		switch kind {
		case "stats":
			return exportStats(o.dir, o.out, o.table, *o.format, o.allColumns)
		case "perfetto":
			return exportPerfetto(o.dir, o.out, fs.Changed("format"))
		case "dataset":
			if o.out == "-" || fs.Changed("format") || fs.Changed("all-columns") {
				return usagef("export: dataset adds the run to the Parquet dataset -o DIR, every column kept: give -o DIR, no --format or --all-columns")
			}
			return addToDataset(ctx, o.out, o.dir)
		case "sweep":
			// -i is a sweep directory: its summary (sweep.json).
			sum, err := sweep.ReadSummary(o.dir)
			if err != nil {
				return fmt.Errorf("export: %w", err)
			}
			return exportSweep(o.dir, o.out, *o.format, sum.Rows)
		}
		return exportRun(ctx, fs, &o, kind)
	}
}

// exportRun writes one of exportKinds of the run in o.dir.
func exportRun(ctx context.Context, fs *pflag.FlagSet, o *exportOptions, kind string) error {
	run, err := openRun(o.dir, "")
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer run.Close()
	st, meta, status := run.Store, run.Meta, run.Meta.Status()
	var filter store.EventFilter
	if kind == "events" {
		if filter, err = eventFilter(fs, st, o); err != nil {
			return err
		}
	}
	format := *o.format
	var figs *output.TokenFigures
	if kind == "faults-per-token" {
		if figs, err = tokenShape(run); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	// The events have no counter columns: nothing of theirs is left out.
	var na *output.Unmeasured
	rowsNA := ""
	if kind != "events" {
		na = unmeasured(run, o.allColumns)
		noteUnmeasured(na)
	} else if why := meta.FaultDetailNA(); why != "" {
		rowsNA = "no row for each fault outside the model files: " + why
		fmt.Fprintf(stderr, "iocorr: note: %s\n", rowsNA)
	}
	err = writeExport(o.out, func(w io.Writer) error {
		switch kind {
		case "faults-per-token":
			return output.TokensWith(ctx, st, w, format, status, na, figs)
		case "faults-per-token-tensor":
			return output.TokenTensors(ctx, st, w, format, status, na)
		}
		return output.Events(ctx, st, w, format, status, filter)
	})
	if err != nil {
		return err
	}
	side := output.NewSidecar(o.dir, status, na)
	side.RowsNA = rowsNA
	if figs != nil {
		figs.NA.AddTo(side)
	}
	if kind != "faults-per-token" { // the exports with a device column
		if devs := noteDevicesNA(st.DevicesNA(), nil); len(devs) > 0 {
			side.ValuesNA = map[string]map[string]string{"device": devs}
		}
	}
	return writeSidecar(o.out, side)
}

// noteDevicesNA says on stderr, one line each, why a device name of na
// names no buffer, of those shown when shown is not nil; it returns those
// it said.
func noteDevicesNA(na map[string]string, shown func(string) bool) map[string]string {
	said := map[string]string{}
	for _, d := range slices.Sorted(maps.Keys(na)) {
		if shown != nil && !shown(d) {
			continue
		}
		said[d] = na[d]
		fmt.Fprintf(stderr, "iocorr: note: device %s: %s\n", d, na[d])
	}
	return said
}

// addToDataset adds the run in run to the study dataset in dir and says
// which run it was, or that it was there already.
func addToDataset(ctx context.Context, dir, run string) error {
	id, added, err := dataset.Add(ctx, dir, run)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	how := "added to"
	if !added {
		how = "already in"
	}
	fmt.Fprintf(stderr, "iocorr: run %s (%s) %s the dataset %s\n", id, run, how, dir)
	return nil
}

// unmeasured is what the run did not measure of the counters,
// with the columns kept when all; its notes go to stderr once.
func unmeasured(run *store.Run, all bool) *output.Unmeasured {
	return &output.Unmeasured{Counters: run.CountersNA(), All: all}
}

// noteUnmeasured says on stderr, once per command and one line per
// reason, which columns are NA or left out and why.
func noteUnmeasured(u *output.Unmeasured) {
	for _, n := range u.Notes() {
		fmt.Fprintf(stderr, "iocorr: note: %s\n", n)
	}
}

// writeSidecar writes s beside an export written to out (not stdout,
// whose reader has stderr's notes): NAME.na.json.
func writeSidecar(out string, s *output.Sidecar) error {
	if out == "-" || out == "" {
		return nil
	}
	return writeExport(output.SidecarPath(out), s.Write)
}

// eventFilter turns the export's filter flags into an store.EventFilter.
func eventFilter(fs *pflag.FlagSet, st *store.Store, o *exportOptions) (store.EventFilter, error) {
	var f store.EventFilter
	var err error
	var lp *int
	if fs.Changed("layer") {
		lp = &o.layer
		f.Layers = map[int]bool{o.layer: true}
	}
	if o.tensor != "" || lp != nil {
		// Also checks that the layer exists; --layer alone then reads the
		// layer index rather than every tensor's of the layer.
		ids, err := st.MatchTensors(o.tensor, lp, true)
		if err != nil {
			return f, fmt.Errorf("export: %w", err)
		}
		if o.tensor != "" {
			f.Tensors = ids
		}
	}
	if fs.Changed("token") {
		if f.Tokens, err = parseTokenRange(o.token); err != nil {
			return f, usagef("export: %v", err)
		}
	}
	if fs.Changed("expert") {
		if o.expert < -1 || o.expert > 0x7ffe {
			return f, usagef("export: --expert %d out of range (-1 selects dense tensors)", o.expert)
		}
		f.Experts = map[int16]bool{int16(o.expert): true}
	}
	if o.op != "" {
		if f.Ops, err = st.OpIDs(o.op); err != nil {
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
	if err := atomicfile.Write(out, 0o644, false, write); err != nil {
		return fmt.Errorf("export: %w", err)
	}
	return nil
}
