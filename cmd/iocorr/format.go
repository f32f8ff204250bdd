package main

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
)

// outputFormat is the --format flag shared by every subcommand that prints
// results: aligned tables for people, CSV and JSON for programs.
type outputFormat string

const (
	formatTable outputFormat = "table"
	formatCSV   outputFormat = "csv"
	formatJSON  outputFormat = "json"
)

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "table|csv|json" }
func (f *outputFormat) Set(s string) error {
	switch outputFormat(s) {
	case formatTable, formatCSV, formatJSON:
		*f = outputFormat(s)
		return nil
	}
	return fmt.Errorf("unknown format %q (want table, csv or json)", s)
}

func formatFlag(fs *pflag.FlagSet) *outputFormat {
	f := formatTable
	fs.Var(&f, "format", "output format: table, csv or json")
	return &f
}

// column is one column of a result. Human renders a cell for the table
// (sizes in KiB/MiB, times in µs/ms); Raw is what CSV and JSON carry.
type column struct {
	Name string
}

// cell holds a raw value for CSV/JSON and its human rendering for tables.
type cell struct {
	Raw   any
	Human string
}

func txt(s string) cell { return cell{Raw: s, Human: s} }
func num[T int | int64 | uint64 | uint32 | int32 | uint](v T) cell {
	return cell{Raw: v, Human: fmt.Sprint(v)}
}
func bytesCell(v uint64) cell { return cell{Raw: v, Human: humanBytes(v)} }
func durCell(ns uint64) cell  { return cell{Raw: ns, Human: humanDuration(ns)} }
func floatCell(v float64, prec int) cell {
	return cell{Raw: v, Human: fmt.Sprintf("%.*f", prec, v)}
}

// resultWriter writes rows in one of the formats. JSON is written as an
// array of objects, one per row, streamed so memory does not grow.
type resultWriter struct {
	w      io.Writer
	format outputFormat
	cols   []column
	tw     *tabwriter.Writer
	csv    *csv.Writer
	n      int
}

func newResultWriter(w io.Writer, format outputFormat, cols []column) *resultWriter {
	rw := &resultWriter{w: w, format: format, cols: cols}
	switch format {
	case formatTable:
		rw.tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = strings.ToUpper(c.Name)
		}
		rw.writeTableRow(names)
	case formatCSV:
		rw.csv = csv.NewWriter(w)
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.Name
		}
		_ = rw.csv.Write(names)
	case formatJSON:
		io.WriteString(w, "[")
	}
	return rw
}

func (rw *resultWriter) writeTableRow(cells []string) {
	for _, s := range cells {
		fmt.Fprint(rw.tw, s, "\t")
	}
	fmt.Fprintln(rw.tw)
}

// Row writes one row; cells must match the columns.
func (rw *resultWriter) Row(cells ...cell) error {
	if len(cells) != len(rw.cols) {
		return fmt.Errorf("internal: row has %d cells, want %d", len(cells), len(rw.cols))
	}
	rw.n++
	switch rw.format {
	case formatTable:
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = c.Human
		}
		rw.writeTableRow(s)
	case formatCSV:
		s := make([]string, len(cells))
		for i, c := range cells {
			s[i] = fmt.Sprint(c.Raw)
		}
		return rw.csv.Write(s)
	case formatJSON:
		obj := make(map[string]any, len(cells))
		for i, c := range cells {
			obj[rw.cols[i].Name] = c.Raw
		}
		b, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		if rw.n > 1 {
			io.WriteString(rw.w, ",")
		}
		io.WriteString(rw.w, "\n  ")
		_, err = rw.w.Write(b)
		return err
	}
	return nil
}

// Close flushes the writer and reports the first write error.
func (rw *resultWriter) Close() error {
	switch rw.format {
	case formatTable:
		return rw.tw.Flush()
	case formatCSV:
		rw.csv.Flush()
		return rw.csv.Error()
	case formatJSON:
		if rw.n > 0 {
			io.WriteString(rw.w, "\n")
		}
		_, err := io.WriteString(rw.w, "]\n")
		return err
	}
	return nil
}

func humanBytes(v uint64) string {
	const unit = 1024
	if v < unit {
		return fmt.Sprintf("%d B", v)
	}
	f := float64(v)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%.1f PiB", f/unit)
}

func humanDuration(ns uint64) string {
	switch {
	case ns < 1000:
		return fmt.Sprintf("%d ns", ns)
	case ns < 1000_000:
		return fmt.Sprintf("%.1f µs", float64(ns)/1e3)
	case ns < 1000_000_000:
		return fmt.Sprintf("%.1f ms", float64(ns)/1e6)
	}
	return fmt.Sprintf("%.2f s", float64(ns)/1e9)
}
