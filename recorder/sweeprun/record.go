// Package sweeprun records a memory-budget sweep: one command once per
// budget, each run an ordinary run directory (DIR/<budget>/) recorded by
// recorder.Record (recorded, then ingested), summed up by
// sweep.Summarize into DIR/sweep.json. It is the sweep's write side, the
// one that links the BPF loader; package sweep reads what it writes.
package sweeprun

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/iocorr/iocorr/internal/launch"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// Budget is one memory limit, with the name its run directory takes.
type Budget struct {
	Name  string // as given, e.g. 64MiB
	Bytes int64
}

// Sweep is a sweep: the budgets and what to record under each.
type Sweep struct {
	Dir     string
	Budgets []Budget
	// Record is the recording of every run; its Dir and MemLimit are set
	// per budget.
	Record recorder.Options
	// Stderr gets a line per run as it starts and ends.
	Stderr io.Writer
	// Dataset, when set, gets each run as it ends (a study's dataset,
	// dataset.Sweep, one floor up).
	Dataset Dataset
}

// Dataset takes a sweep's runs: run is the run's directory, row its
// summary, command the command recorded.
type Dataset interface {
	AddRun(ctx context.Context, run string, row *sweep.Row, command []string) error
}

// Run records opts.Record.Argv once per budget into DIR/<budget>/ and
// writes DIR/sweep.json, and hands each run to opts.Dataset. A run that
// fails (the command OOM-killed, a non-zero exit, a recording error) is
// a row saying so; the sweep goes on. The error is for what ends the
// sweep: a cancelled ctx, a summary that cannot be written; then a run
// the dataset refused.
func Run(ctx context.Context, opts Sweep) (sweep.Summary, error) {
	sum := sweep.Summary{Command: opts.Record.Argv, Cold: opts.Record.Cold}
	if err := checkBudgets(opts.Budgets); err != nil {
		return sum, err
	}
	// Options that cannot work are said once, before any run.
	first := opts.Record
	first.Dir, first.MemLimit = filepath.Join(opts.Dir, opts.Budgets[0].Name), opts.Budgets[0].Bytes
	if err := first.Validate(); err != nil {
		return sum, err
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return sum, err
	}
	var dsErr error
	for _, b := range opts.Budgets {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		fmt.Fprintf(opts.Stderr, "iocorr: sweep: recording under %s\n", b.Name)
		row := runOne(ctx, opts, b)
		fmt.Fprintf(opts.Stderr, "iocorr: sweep: %s: %s\n", b.Name, row.Status)
		sum.Rows = append(sum.Rows, row)
		// Written after every run: an interrupted sweep keeps its rows.
		if err := sweep.WriteSummary(opts.Dir, &sum); err != nil {
			return sum, err
		}
		if opts.Dataset != nil {
			// A run the dataset refused is said at the end: the sweep
			// goes on, its runs are recorded all the same.
			if err := opts.Dataset.AddRun(ctx, filepath.Join(opts.Dir, b.Name), &row, opts.Record.Argv); err != nil && dsErr == nil {
				dsErr = fmt.Errorf("dataset: run %s: %w", b.Name, err)
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return sum, err
	}
	return sum, dsErr
}

// checkBudgets refuses a sweep with no budget, one whose name cannot be a
// directory, or one given twice.
func checkBudgets(budgets []Budget) error {
	if len(budgets) == 0 {
		return errors.New("no memory budget given")
	}
	seen := map[string]bool{}
	for _, b := range budgets {
		if b.Name == "" || strings.ContainsAny(b.Name, `/\`) || b.Name == "." || b.Name == ".." {
			return fmt.Errorf("budget %q cannot name a directory", b.Name)
		}
		if seen[b.Name] {
			return fmt.Errorf("budget %s given twice", b.Name)
		}
		seen[b.Name] = true
	}
	return nil
}

func runOne(ctx context.Context, opts Sweep, b Budget) sweep.Row {
	ro := opts.Record
	ro.Dir = filepath.Join(opts.Dir, b.Name)
	ro.MemLimit = b.Bytes
	row := sweep.Row{Budget: b.Name, MemLimit: b.Bytes, RunDir: b.Name, NA: map[string]string{}}
	// The command's own report of its speed, read beside the untraced run's.
	said := launch.Share(&bytes.Buffer{})
	ro.Stdout, ro.Stderr = teeTo(ro.Stdout, os.Stdout, said), teeTo(ro.Stderr, os.Stderr, said)
	// Every run that ran is ingested, failed ones too: they stay
	// queryable for why they failed.
	ro.NoIngest = false
	res, err := recorder.Record(ctx, ro)
	row.ExitCode = res.Meta.Child.ExitCode
	var ierr *recorder.IngestError
	switch {
	case err != nil && !res.Ran:
		row.Status = "not run: " + err.Error()
	case errors.As(err, &ierr):
		if row.Status = runStatus(&res.Meta); row.Status == sweep.StatusOK {
			row.Status = "ingest failed: " + ierr.Err.Error()
		}
	case err != nil:
		row.Status = "recording failed: " + err.Error()
	default:
		row.Status = runStatus(&res.Meta)
	}
	if row.Status != sweep.StatusOK {
		row.AllNA("the run failed (see status)")
		return row
	}
	if err := sweep.Summarize(ro.Dir, &row); err != nil {
		row.Status = "store unreadable: " + err.Error()
		row.AllNA("the run's store could not be read")
		return row
	}
	if tps, ok := sweep.ReportedTokensPerS(said.Bytes()); ok {
		row.ReportedTokensPerS = &tps
	} else {
		row.SetNA("reported_tokens_per_s", sweep.NoReport(said.Bytes()))
	}
	var models []string
	for _, mf := range res.Meta.Models {
		models = append(models, mf.Path)
	}
	tps, err := untraced(ctx, opts, b, models)
	if err != nil {
		row.SetNA("untraced_tokens_per_s", "the untraced run failed: "+err.Error())
	} else {
		row.UntracedTokensPerS = &tps
	}
	return row
}

// runStatus says what became of a recording that ended in order.
func runStatus(m *rundir.Meta) string {
	c := &m.Child
	switch {
	case c.Signal != "":
		s := "killed by " + c.Signal
		cc := m.Controls.CgroupCounters
		if n := cc["memory.events.oom_kill"]; n > 0 {
			s += fmt.Sprintf(" (OOM: %d OOM kills in its memory cgroup)", n)
		} else if n := cc["memory.failcnt"]; n > 0 && c.Signal == "SIGKILL" {
			s += fmt.Sprintf(" (OOM: its memory cgroup hit the limit %d times)", n)
		}
		return s
	case c.ExitCode != 0:
		return fmt.Sprintf("exit status %d", c.ExitCode)
	}
	if s := m.Status(); s != "" {
		return s
	}
	return sweep.StatusOK
}
