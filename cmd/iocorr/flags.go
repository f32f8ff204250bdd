package main

import (
	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/output"
)

func init() { output.Version = version }

// memLimitMeans is what --mem-limit means wherever it is taken: record,
// sweep and pin run a command under it, predict and plan predict for it
// (the same limit, less the run's non-file memory, is the model's page
// cache).
const memLimitMeans = "the limit of the memory cgroup a command runs in (its page cache and anonymous memory together)"

// memLimitFlag adds --mem-limit, one budget in bytes, to p; help says
// what the command does with it.
func memLimitFlag(fs *pflag.FlagSet, p *int64, help string) {
	fs.Var((*units.Size)(p), "mem-limit", help+": "+memLimitMeans)
}

// memLimitsFlag adds --mem-limit of the commands that take several
// budgets, comma-separated.
func memLimitsFlag(fs *pflag.FlagSet, help string) *units.Sizes {
	s := &units.Sizes{}
	fs.Var(s, "mem-limit", help+", comma-separated; each "+memLimitMeans)
	return s
}

// formatFlag adds --format (table, csv, json, jsonl) with default def.
func formatFlag(fs *pflag.FlagSet, def ...output.Format) *output.Format {
	f := output.Table
	if len(def) > 0 {
		f = def[0]
	}
	fs.Var(&f, "format", "output format: table, csv (RFC 4180), json (one array of objects) or jsonl (an object per line)")
	return &f
}

// fileFormatFlag adds --format of the commands that also write Parquet.
func fileFormatFlag(fs *pflag.FlagSet, def output.Format) *output.Format {
	f := &output.FileFormat{Format: def}
	fs.Var(f, "format", "output format: table, csv (RFC 4180), json (one array of objects), jsonl (an object per line) or parquet (binary: to a file)")
	return &f.Format
}
