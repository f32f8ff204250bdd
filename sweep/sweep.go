// Package sweep is the read side of a memory-budget sweep: each budget's
// run summed up against its budget (the curve of tokens/s and bytes read
// per token over memory that SSD-offload studies plot), and the summary
// file DIR/sweep.json that holds them. Each run is an ordinary run
// directory (DIR/<budget>/) that every other iocorr command reads; the
// recording of the runs is package recorder/sweeprun, apart so that readers of
// a summary (the report, export) never link the BPF loader.
package sweep

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/iocorr/iocorr/internal/atomicfile"
)

// SummaryFile is the sweep's summary in its directory.
const SummaryFile = "sweep.json"

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
	// UntracedTokensPerS is the decode speed the command reported when
	// run again untraced under the same budget (same cgroup limit, same
	// eviction, right after the traced run): the study's figure, not the
	// tracer's. ReportedTokensPerS is what the traced run reported the
	// same way, to compare like with like (ReportedTokensPerS).
	UntracedTokensPerS *float64 `json:"untraced_tokens_per_s"`
	ReportedTokensPerS *float64 `json:"reported_tokens_per_s"`
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

// SetNA marks one figure of r not computed, for reason. Summarize leaves
// NA nil where every figure was computed; a figure the sweep adds after it
// (the reported and untraced speeds) goes through here.
func (r *Row) SetNA(figure, reason string) {
	if r.NA == nil {
		r.NA = map[string]string{}
	}
	r.NA[figure] = reason
}

// AllNA marks every figure of r not computed, for reason: a run that
// failed has none.
func (r *Row) AllNA(reason string) {
	for _, f := range []string{"tokens_per_s", "untraced_tokens_per_s", "reported_tokens_per_s", "bytes_read_per_token", "major_faults_per_token", "stall_share", "expert_hit_rate"} {
		r.SetNA(f, reason)
	}
}

// WriteSummary writes DIR/sweep.json, aside and renamed.
func WriteSummary(dir string, s *Summary) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(filepath.Join(dir, SummaryFile), 0o644, false, append(b, '\n'))
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
