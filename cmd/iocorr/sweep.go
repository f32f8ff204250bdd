package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/sweep"
	"github.com/iocorr/iocorr/sweep/record"
)

func init() {
	register(&command{
		name:    "sweep",
		summary: "record a command once per memory budget and sum each run up against its budget",
		usage:   "--mem-limit 64MiB,96MiB,... [-o DIR] [--cold] [record flags] [--format table|csv|json|jsonl|parquet] -- CMD [ARGS...]",
		flags:   sweepFlags,
	})
}

func sweepFlags(fs *pflag.FlagSet) func(context.Context, []string) error {
	o := &recordOpts{}
	var limits []string
	fs.StringSliceVar(&limits, "mem-limit", nil, "memory budgets, comma-separated (e.g. 64MiB,96MiB,128MiB); one run each, in DIR/<budget>/")
	dir := fs.StringP("output", "o", "iocorr.sweep", "sweep directory to write")
	fs.BoolVarP(&o.force, "force", "f", false, "overwrite existing run directories of the sweep")
	runFlags(fs, o, "before each run")
	format := fileFormatFlag(fs, formatTable)
	return func(ctx context.Context, argv []string) error {
		if len(limits) == 0 {
			return usagef("sweep: --mem-limit wants the budgets (e.g. --mem-limit 64MiB,96MiB,128MiB)")
		}
		var budgets []record.Budget
		for _, l := range limits {
			n, err := parseSize(l)
			if err != nil {
				return usagef("sweep: --mem-limit %q: %v", l, err)
			}
			budgets = append(budgets, record.Budget{Name: l, Bytes: n})
		}
		o.out = *dir
		stdout, stderr = shareable(stdout), shareable(stderr)
		ro, err := o.recorderOptions(argv)
		if err != nil {
			return usagef("sweep: %s", strings.TrimPrefix(err.Error(), "record: "))
		}
		ro.Progress = nil
		// stdout is the summary's: the command's own output goes to
		// stderr, beside the sweep's progress.
		ro.Stdout = stderr
		probe := ro
		probe.Dir, probe.MemLimit = filepath.Join(*dir, budgets[0].Name), budgets[0].Bytes
		if err := probe.Validate(); err != nil {
			var bad *recorder.OptionError
			if errors.As(err, &bad) {
				return usagef("sweep: %s", bad.Msg)
			}
			return fmt.Errorf("sweep: %w", err)
		}
		sum, err := record.Run(ctx, record.Options{Dir: *dir, Budgets: budgets, Record: ro, Stderr: stderr})
		if len(sum.Rows) > 0 {
			if werr := writeSweepOutput(*dir, *format, sum.Rows); werr != nil && err == nil {
				err = werr
			}
		}
		if err != nil {
			return fmt.Errorf("sweep: %w", err)
		}
		return nil
	}
}

// writeSweepOutput prints the summary in format; Parquet, binary, goes to
// DIR/sweep.parquet instead (sweep.json is always there).
func writeSweepOutput(dir string, format outputFormat, rows []sweep.Row) error {
	if format != formatParquet {
		return writeSweepRows(stdout, format, rows)
	}
	out := filepath.Join(dir, "sweep.parquet")
	if err := writeExport(out, func(w io.Writer) error { return writeSweepRows(w, format, rows) }); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "iocorr: sweep: summary written to %s\n", out)
	return nil
}

// sweepColumns are a sweep summary's columns, in every format; the JSON
// formats carry sweep.Row as in sweep.json.
var sweepColumns = []typedColumn{{"budget", typString, false}, {"mem_limit_bytes", typInt64, false}, {"status", typString, false},
	{"exit_code", typInt32, false}, {"decode_tokens", typUint64, false}, {"tokens_per_s", typFloat64, true},
	{"bytes_read_per_token", typFloat64, true}, {"major_faults_per_token", typFloat64, true}, {"stall_share", typFloat64, true},
	{"expert_hit_rate", typFloat64, true}, {"na", typString, false}, {"run_dir", typString, false}}

func writeSweepRows(w io.Writer, format outputFormat, rows []sweep.Row) error {
	if format == formatJSON || format == formatJSONL {
		enc := json.NewEncoder(w)
		if format == formatJSON {
			enc.SetIndent("", "  ")
			return enc.Encode(rows)
		}
		for i := range rows {
			if err := enc.Encode(&rows[i]); err != nil {
				return err
			}
		}
		return nil
	}
	rw := newRowWriter(w, format, sweepColumns)
	fl := func(v *float64) cell {
		if v == nil {
			return naCell()
		}
		return floatCell(*v)
	}
	for _, r := range rows {
		if err := rw.Row(txt(r.Budget), num(r.MemLimit), txt(r.Status), num(r.ExitCode), num(r.Decode), fl(r.TokensPerS),
			fl(r.BytesPerToken), fl(r.MajorPerToken), fl(r.StallShare), fl(r.ExpertHitRate), txt(naText(r.NA)), txt(r.RunDir)); err != nil {
			return err
		}
	}
	return rw.Close()
}

// naText lists why figures are NA, one "figure: reason" each, in name
// order.
func naText(na map[string]string) string {
	var parts []string
	for k, v := range na {
		parts = append(parts, k+": "+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, "; ")
}
