package main

import (
	"github.com/spf13/pflag"

	"github.com/iocorr/iocorr/output"
)

func init() { output.Version = version }

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
