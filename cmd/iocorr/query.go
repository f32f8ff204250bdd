package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

func init() {
	register(&command{
		name:    "query",
		summary: "per-token faults, page-cache and device I/O of tensors, layers, experts or ops of a run",
		usage:   "[-i DIR] [--tensor NAME|GLOB] [--token N|A-B] [--layer L] [--expert E] [--op NAME] [--phase prefill|decode] [--by DIM] [--sort COL] [--top K] [--format table|csv|json|jsonl]",
		flags:   queryFlags,
	})
}

// parseTokenRange parses N or A-B.
func parseTokenRange(s string) (*[2]uint32, error) {
	lo, hi, isRange := strings.Cut(s, "-")
	a, err := strconv.ParseUint(lo, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("bad --token %q (want N or A-B)", s)
	}
	b := a
	if isRange {
		if b, err = strconv.ParseUint(hi, 10, 32); err != nil || b < a {
			return nil, fmt.Errorf("bad --token %q (want N or A-B with A <= B)", s)
		}
	}
	return &[2]uint32{uint32(a), uint32(b)}, nil
}

func queryFlags(fs *pflag.FlagSet) func(ctx context.Context, args []string) error {
	dir := fs.StringP("input", "i", rundir.Default, "run directory")
	tensor := fs.String("tensor", "", "tensor name or glob, e.g. 'blk.*.ffn_down_exps.weight'")
	token := fs.String("token", "", "token N or range A-B (llama_decode calls, from 1)")
	layer := fs.Int("layer", -1, "only tensors of layer L")
	expert := fs.Int("expert", -1, "only expert E of *_exps tensors")
	op := fs.String("op", "", "only events of op NAME (e.g. MUL_MAT)")
	phase := fs.String("phase", "", "prefill, decode or none")
	by := fs.String("by", "token", "group by "+strings.Join(index.GroupBys, "|"))
	sortCol := fs.String("sort", "", "sort descending by "+strings.Join(index.SortColumns, "|"))
	top := fs.Int("top", 0, "keep the first K rows")
	all := fs.Bool("all", false, "include [other file], [anonymous] and [model header] without --tensor")
	format := formatFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("query: takes no arguments, got %q", args)
		}
		q := index.Query{Tensor: *tensor, Op: *op, Phase: *phase, By: *by, Sort: *sortCol, Top: *top, Pseudos: *all}
		if fs.Changed("token") {
			r, err := parseTokenRange(*token)
			if err != nil {
				return usagef("query: %v", err)
			}
			q.Token = r
		}
		if fs.Changed("layer") {
			q.Layer = layer
		}
		if fs.Changed("expert") {
			q.Expert = expert
		}
		if *top < 0 {
			return usagef("query: --top must not be negative")
		}
		if fs.Changed("expert") && *expert < 0 {
			return usagef("query: --expert must not be negative")
		}
		st, status, err := openRun(*dir)
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		defer st.Close()
		rows, err := st.Query(q)
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		selNA := ""
		if q.By == "expert" {
			meta, err := rundir.ReadMeta(*dir)
			if err != nil {
				return fmt.Errorf("query: %w", err)
			}
			if selNA = picksNA(meta); selNA != "" {
				fmt.Fprintf(stderr, "iocorr: note: %s is NA: %s\n", index.Selected, selNA)
			}
		}
		return writeQueryRows(rows, q.By, *format, status, selNA)
	}
}

// picksNA says why a run has no record of the router's expert picks:
// no probe on ggml_compute_forward_get_rows attached (a build that
// inlined or stripped it, or no llama.cpp at all), or a ggml struct
// layout that failed validation; "" when picks were recorded.
func picksNA(m *rundir.Meta) string {
	if m.Layout != nil && m.Layout.Invalid != "" {
		return "the router's expert picks were not recorded: the ggml struct layout failed validation against the target (" + m.Layout.Invalid + ")"
	}
	for _, p := range m.Probes {
		if p.Symbol == ggml.SymGetRows && p.Error == "" {
			return ""
		}
	}
	return "the router's expert picks were not recorded: no probe on " + ggml.SymGetRows + " attached in this run (iocorr doctor -- CMD says which probe points the build has)"
}

// openRunMeta opens DIR's store and reads its metadata, for the commands
// that need both (the status goes to stderr as with openRun).
func openRunMeta(dir string) (*index.Store, *rundir.Meta, error) {
	st, _, err := openRun(dir)
	if err != nil {
		return nil, nil, err
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return st, meta, nil
}

// openRun opens DIR's store and its run status (rundir.Meta.Status: ""
// for a run recorded to its end), which it also prints on stderr.
func openRun(dir string) (*index.Store, string, error) {
	st, err := index.Open(dir)
	if err != nil {
		return nil, "", err
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		st.Close()
		return nil, "", err
	}
	status := meta.Status()
	if status != "" {
		fmt.Fprintf(stderr, "iocorr: warning: %s\n", status)
	}
	return st, status, nil
}

// writeQueryRows prints query rows. A table shows what a person reads
// first (event.Counter.Table); the other formats carry every counter
// as a raw number. Columns are the counters' names everywhere.
// selNA, when set, says why the router's picks were not recorded: the
// selected column is then NA, not a count of zero.
func writeQueryRows(rows []index.Row, by string, format outputFormat, status, selNA string) error {
	if by == "" {
		by = "token"
	}
	tableOnly := format == formatTable
	cols := []column{{Name: by}}
	if by == "token" {
		cols = append(cols, column{Name: "phase"})
	}
	if by == "expert" {
		cols = append(cols, column{Name: index.Selected})
	}
	cols = counterColumns(cols, tableOnly)
	rw := newResultWriter(stdout, format, cols)
	rw.SetStatus(status)
	cells := make([]cell, 0, len(cols))
	for _, r := range rows {
		cells = append(cells[:0], txt(r.Key))
		if by == "token" {
			cells[0] = num(r.Token)
			cells = append(cells, txt(event.PhaseName(r.Phase)))
		}
		if by == "expert" {
			if selNA != "" {
				cells = append(cells, naCell())
			} else {
				cells = append(cells, num(r.Selected))
			}
		}
		cells = counterCells(cells, &r.Counters, tableOnly)
		if err := rw.Row(cells...); err != nil {
			return err
		}
	}
	return rw.Close()
}
