// Package sweep records one command once per memory budget and sums each
// run up against its budget: the curve of tokens/s and bytes read per
// token over memory that SSD-offload studies plot. Each run is an
// ordinary run directory (DIR/<budget>/), recorded by recorder.Run and
// ingested by pipeline.Ingest, so every other iocorr command reads it.
package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
)

// SummaryFile is the sweep's summary in its directory.
const SummaryFile = "sweep.json"

// Budget is one memory limit, with the name its run directory takes.
type Budget struct {
	Name  string // as given, e.g. 64MiB
	Bytes int64
}

// Options are a sweep: the budgets and what to record under each.
type Options struct {
	Dir     string
	Budgets []Budget
	// Record is the recording of every run; its Dir and MemLimit are set
	// per budget.
	Record recorder.Options
	// Stderr gets a line per run as it starts and ends.
	Stderr io.Writer
}

// StatusOK is the status of a run whose command exited 0 and whose
// recording finished complete.
const StatusOK = "ok"

// Row is one budget's run, summed up. A figure that could not be computed
// is nil, with the reason in NA under the figure's name.
type Row struct {
	Budget    string `json:"budget"`
	MemLimit  int64  `json:"mem_limit_bytes"`
	Status    string `json:"status"` // StatusOK, or why the run failed
	ExitCode  int    `json:"exit_code"`
	RunDir    string `json:"run_dir"`
	Decode    uint64 `json:"decode_tokens"`
	DecodeNS  uint64 `json:"decode_wall_ns"`
	ReadBytes uint64 `json:"decode_bytes_read"`
	Major     uint64 `json:"decode_major_faults"`
	StallNS   uint64 `json:"decode_fault_stall_ns"`
	// TokensPerS is decode tokens ÷ the decode wall time (first decode
	// call's entry to the last one's return).
	TokensPerS *float64 `json:"tokens_per_s"`
	// BytesPerToken and MajorPerToken are over decode tokens.
	BytesPerToken *float64 `json:"bytes_read_per_token"`
	MajorPerToken *float64 `json:"major_faults_per_token"`
	// StallShare is the decode tokens' fault stall ÷ their time in
	// llama_decode. Stalls of threads are summed, so it exceeds 1 when
	// several threads wait at once.
	StallShare *float64 `json:"stall_share"`
	// ExpertHitRate is the share of the router's picks whose expert was
	// resident.
	ExpertHitRate *float64          `json:"expert_hit_rate"`
	NA            map[string]string `json:"na,omitempty"`
}

// Summary is what a sweep writes to DIR/sweep.json.
type Summary struct {
	Command []string `json:"command"`
	Cold    bool     `json:"cold"`
	Rows    []Row    `json:"rows"`
}

// Run records opts.Record.Argv once per budget into DIR/<budget>/ and
// writes DIR/sweep.json. A run that fails (the command OOM-killed, a
// non-zero exit, a recording error) is a row saying so; the sweep goes
// on. The error is for what ends the sweep: a cancelled ctx, a summary
// that cannot be written.
func Run(ctx context.Context, opts Options) (Summary, error) {
	sum := Summary{Command: opts.Record.Argv, Cold: opts.Record.Cold}
	if len(opts.Budgets) == 0 {
		return sum, errors.New("no memory budget given")
	}
	seen := map[string]bool{}
	for _, b := range opts.Budgets {
		if b.Name == "" || strings.ContainsAny(b.Name, `/\`) || b.Name == "." || b.Name == ".." {
			return sum, fmt.Errorf("budget %q cannot name a directory", b.Name)
		}
		if seen[b.Name] {
			return sum, fmt.Errorf("budget %s given twice", b.Name)
		}
		seen[b.Name] = true
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return sum, err
	}
	for _, b := range opts.Budgets {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		fmt.Fprintf(opts.Stderr, "iocorr: sweep: recording under %s\n", b.Name)
		row := runOne(ctx, opts, b)
		fmt.Fprintf(opts.Stderr, "iocorr: sweep: %s: %s\n", b.Name, row.Status)
		sum.Rows = append(sum.Rows, row)
		// Written after every run: an interrupted sweep keeps its rows.
		if err := WriteSummary(opts.Dir, &sum); err != nil {
			return sum, err
		}
	}
	return sum, ctx.Err()
}

func runOne(ctx context.Context, opts Options, b Budget) Row {
	ro := opts.Record
	ro.Dir = filepath.Join(opts.Dir, b.Name)
	ro.MemLimit = b.Bytes
	row := Row{Budget: b.Name, MemLimit: b.Bytes, RunDir: b.Name, NA: map[string]string{}}
	res, err := recorder.Run(ctx, ro)
	row.ExitCode = res.Meta.Child.ExitCode
	switch {
	case err != nil && !res.Ran:
		row.Status = "not run: " + err.Error()
	case err != nil:
		row.Status = "recording failed: " + err.Error()
	default:
		row.Status = runStatus(&res.Meta)
	}
	if res.Ran {
		// Every run that ran is ingested, failed ones too: they stay
		// queryable for why they failed.
		if _, ierr := pipeline.Ingest(ctx, ro.Dir, pipeline.Options{}); ierr != nil && row.Status == StatusOK {
			row.Status = "ingest failed: " + ierr.Error()
		}
	}
	if row.Status != StatusOK {
		row.naAll("the run failed (see status)")
		return row
	}
	if err := Summarize(ro.Dir, &row); err != nil {
		row.Status = "store unreadable: " + err.Error()
		row.naAll("the run's store could not be read")
	}
	return row
}

// Summarize computes r's figures from the store of the run in dir.
func Summarize(dir string, r *Row) error {
	if r.NA == nil {
		r.NA = map[string]string{}
	}
	st, err := index.Open(dir)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := r.figures(st); err != nil {
		return err
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		return err
	}
	return r.expertHitRate(st, meta)
}

// expertHitRate takes the run's real expert hit rate from iocorr stats
// (decode picks whose expert slice was wholly resident), so that the sweep
// and stats can never disagree on it.
func (r *Row) expertHitRate(st *index.Store, meta *rundir.Meta) error {
	if !hasExperts(st) {
		r.NA["expert_hit_rate"] = "the model has no experts"
		return nil
	}
	rep, err := stats.Compute(st, meta, stats.Options{K: []int{1}, NoTokenResidency: true})
	if err != nil {
		return fmt.Errorf("computing the expert hit rate: %w", err)
	}
	if t := rep.Table("cache_sim"); t != nil {
		pol, hit := t.Col("policy"), t.Col("hit_rate_ratio")
		for _, row := range t.Rows {
			if pol >= 0 && hit >= 0 && row[pol].S == "real" {
				if v := row[hit]; v.NA != "" {
					r.NA["expert_hit_rate"] = v.NA
				} else {
					h := v.F
					r.ExpertHitRate = &h
					delete(r.NA, "expert_hit_rate")
				}
			}
		}
	}
	if len(r.NA) == 0 {
		r.NA = nil
	}
	return nil
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
	return StatusOK
}

func (r *Row) naAll(reason string) {
	for _, f := range []string{"tokens_per_s", "bytes_read_per_token", "major_faults_per_token", "stall_share", "expert_hit_rate"} {
		r.NA[f] = reason
	}
}

// figures computes the row's figures from the store's token rows.
func (r *Row) figures(st *index.Store) error {
	var first, last, inDecode uint64
	var tokens uint64
	err := st.EachToken(func(t *event.TokenInfo) error {
		if t.Phase != event.PhaseDecode {
			return nil
		}
		n := uint64(max(t.NTokens, 0))
		r.Decode += n
		r.ReadBytes += t.ReadBytes
		r.Major += t.Major
		r.StallNS += t.StallNS
		if t.StartNS == 0 || t.EndNS < t.StartNS {
			return nil
		}
		// Only tokens whose call was timed count toward tokens/s.
		tokens += n
		inDecode += t.EndNS - t.StartNS
		if first == 0 || t.StartNS < first {
			first = t.StartNS
		}
		last = max(last, t.EndNS)
		return nil
	})
	if err != nil {
		return err
	}
	ratio := func(name string, num, den float64, na string) *float64 {
		if den == 0 {
			r.NA[name] = na
			return nil
		}
		v := num / den
		return &v
	}
	if r.Decode == 0 {
		r.NA["tokens_per_s"] = "no decode token was recorded"
		r.NA["bytes_read_per_token"] = "no decode token was recorded"
		r.NA["major_faults_per_token"] = "no decode token was recorded"
		r.NA["stall_share"] = "no decode token was recorded"
	} else {
		if last > first {
			r.DecodeNS = last - first
		}
		r.TokensPerS = ratio("tokens_per_s", float64(tokens)*1e9, float64(r.DecodeNS), "no decode call was timed")
		r.BytesPerToken = ratio("bytes_read_per_token", float64(r.ReadBytes), float64(r.Decode), "")
		r.MajorPerToken = ratio("major_faults_per_token", float64(r.Major), float64(r.Decode), "")
		r.StallShare = ratio("stall_share", float64(r.StallNS), float64(inDecode), "no decode call was timed")
	}
	r.NA["expert_hit_rate"] = "iocorr stats has no real-run row in its cache_sim table"
	return nil
}

func hasExperts(st *index.Store) bool {
	for i := range st.Tensors {
		if st.Tensors[i].Experts > 0 {
			return true
		}
	}
	return false
}

// WriteSummary writes DIR/sweep.json, aside and renamed.
func WriteSummary(dir string, s *Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+SummaryFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, SummaryFile))
}

// ReadSummary reads DIR/sweep.json.
func ReadSummary(dir string) (*Summary, error) {
	b, err := os.ReadFile(filepath.Join(dir, SummaryFile))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s is no sweep directory (no %s)", dir, SummaryFile)
		}
		return nil, err
	}
	var s Summary
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, SummaryFile), err)
	}
	return &s, nil
}
