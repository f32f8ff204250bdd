package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
)

func init() {
	register(&command{
		name:    "query",
		summary: "per-token faults, page-cache and device I/O of tensors, layers, experts or ops of a run",
		usage:   "[-i DIR] [--tensor NAME|GLOB] [--token N|A-B] [--layer L] [--expert E] [--op NAME] [--phase prefill|decode] [--by DIM] [--sort COL] [--top K] [--all-columns] [--format table|csv|json|jsonl]",
		flags:   queryFlags,
		man:     queryManual,
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
	var q store.Query
	dir := fs.StringP("input", "i", rundir.Default, "run directory")
	fs.StringVar(&q.Tensor, "tensor", "", "tensor name or glob, e.g. 'blk.*.ffn_down_exps.weight'")
	token := fs.String("token", "", "token N or range A-B (llama_decode calls, from 1)")
	layer := fs.Int("layer", -1, "only tensors of layer L")
	expert := fs.Int("expert", -1, "only expert E of *_exps tensors")
	fs.StringVar(&q.Op, "op", "", "only events of op NAME (e.g. MUL_MAT)")
	fs.StringVar(&q.Phase, "phase", "", "prefill, decode or none")
	fs.StringVar(&q.By, "by", "token", "group by "+strings.Join(store.GroupBys, "|"))
	fs.StringVar(&q.Sort, "sort", "", "sort descending by "+strings.Join(store.SortColumns, "|"))
	fs.IntVar(&q.Top, "top", 0, "keep the first K rows")
	fs.BoolVar(&q.Pseudos, "all", false, "include [other file], [anonymous] and [model header] without --tensor (by layer: layer null, the name in pseudo_tensor)")
	allColumns := fs.Bool("all-columns", false, "keep the columns the run did not measure (NA in every row) rather than leave them out")
	format := formatFlag(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("query: takes no arguments, got %q", args)
		}
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
		if err := q.Validate(); err != nil {
			return usagef("query: %v", err)
		}
		run, err := openRun(*dir, "")
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		defer run.Close()
		st, meta := run.Store, run.Meta
		na := unmeasured(run, *allColumns)
		if q.By == "expert" {
			na.Selected = run.PicksNA(&q)
		}
		// Sorting by a counter the run did not measure would order zeros.
		if why, ok := na.Counters[q.Sort]; ok {
			return usagef("query: --sort %s: %s", q.Sort, why)
		}
		rows, err := st.Query(q)
		if err != nil {
			return fmt.Errorf("query: %w", err)
		}
		noteUnmeasured(na)
		if q.By == "device" || q.By == "layer" {
			noteDevicesNA(st.DevicesNA(), func(d string) bool {
				return slices.ContainsFunc(rows, func(r store.Row) bool {
					return r.Key == d || slices.Contains(strings.Split(r.Devices, "+"), d)
				})
			})
		}
		// The I/O shape is the whole token's: beside rows of some of its
		// tensors or ops it would pass for theirs.
		var figs *output.TokenFigures
		if q.By == "token" && q.Tensor == "" && q.Layer == nil && q.Expert == nil && q.Op == "" {
			if figs, err = tokenShape(run); err != nil {
				return fmt.Errorf("query: %w", err)
			}
		}
		return output.QueryRowsWith(stdout, rows, q.By, *format, meta.Status(), na, figs)
	}
}
