// Package dataset keeps a study's runs as one hive-partitioned Parquet
// dataset: DIR/TABLE/run=ID/data.parquet for each table of a run, and
// DIR/runs/run=ID/data.parquet with one row describing the run (model,
// quantization, budget, tier, kernel, llama.cpp build, host, speed). A
// reader that knows hive partitioning (DuckDB, Spark, Trino, ClickHouse,
// pandas through pyarrow) reads each table of every run as one table with
// a run column, and joins it to runs on run.
//
// A run's ID comes from its meta.json (its start and a hash of the file),
// so adding a run again finds it there and leaves it: Add is idempotent.
// A run's files are written aside and moved into place table by table,
// its runs row last: a run without its runs row was not wholly added, and
// the next Add of it writes it again.
package dataset

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/sweep"
)

// The dataset's tables (directories of DIR).
const (
	Runs         = "runs"          // a row per run: what it ran, where, how fast
	Tokens       = "tokens"        // a row per token (export faults-per-token)
	TokenTensors = "token_tensors" // a row per token × tensor × expert (export faults-per-token-tensor)
	Experts      = "experts"       // a row per expert (query --by expert)
	// Stats is every figure of iocorr stats's tables a person reads, a
	// row each (output.StatsLong); the long tables below have their own.
	Stats = "stats"
	// ExpertActivations is stats's expert_activations: a row per phase ×
	// MoE layer × expert, the router's picks (per-layer routing).
	ExpertActivations = "expert_activations"
	// CacheSimLayers is stats's cache_sim_layers: a row per MoE layer ×
	// policy × cache size, decode.
	CacheSimLayers = "cache_sim_layers"
	// Residency is stats's residency: a row per token × tensor, the pages
	// resident at the token's start.
	Residency = "residency"
	// IOShapeTokens is stats's io_shape_tokens: a row per token, the
	// models' device busy share, requests and faults in flight, and the
	// verdict (the phases' are in Stats, table io_shape).
	IOShapeTokens = stats.IOShapeTokensTable
)

// Tables are the tables of a run, Runs last (it is written last).
var Tables = []string{Tokens, TokenTensors, Experts, Stats, ExpertActivations, CacheSimLayers, Residency, IOShapeTokens, Runs}

// format is the dataset's files': Parquet with signed integers only, which
// every engine reads as the integers they are.
const format = output.ParquetSigned

// FileName is the name of a table's file in a run's partition.
const FileName = "data.parquet"

// RunID is the ID of the run whose meta.json holds b: its start (UTC, to
// the second) and the first 8 bytes of the SHA-256 of b, in hex, e.g.
// 20261127T061502Z-1f2e3d4c5b6a7980. Text no hive reader takes for a
// number or a date, sorted by start.
func RunID(m *rundir.Meta, b []byte) string {
	return m.Start.UTC().Format("20060102T150405Z") + "-" + sha256Hex(b)[:16]
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Partition is the directory of table's rows of run id in dir.
func Partition(dir, table, id string) string {
	return filepath.Join(dir, table, "run="+id)
}

// Add adds the run in run to the dataset in dir (made if missing) and
// returns its ID; added is false when the run was there already.
func Add(ctx context.Context, dir, run string) (id string, added bool, err error) {
	_, id, err = readMeta(run)
	if err != nil {
		return "", false, err
	}
	if there, err := present(dir, id); err != nil || there {
		return id, false, err
	}
	r, err := store.OpenRun(run)
	if err != nil {
		return "", false, err
	}
	defer r.Close()
	var sum sweep.Row
	if err := sweep.SummarizeRun(r, &sum); err != nil {
		return "", false, err
	}
	snaps, err := r.Snapshots()
	if err != nil {
		return "", false, err
	}
	rep, err := stats.Compute(r, stats.Options{Snapshots: snaps})
	if err != nil {
		return "", false, err
	}
	defer rep.Close()
	w := &writer{ctx: ctx, dir: dir, id: id, run: run, src: r, sum: &sum, rep: rep}
	for _, t := range Tables {
		if err := w.table(t); err != nil {
			return "", false, fmt.Errorf("dataset %s: table %s: %w", dir, t, err)
		}
	}
	return id, true, nil
}

// readMeta reads the meta.json of run and the run's ID.
func readMeta(run string) (*rundir.Meta, string, error) {
	b, err := os.ReadFile(filepath.Join(run, rundir.MetaFile))
	if err != nil {
		return nil, "", err
	}
	meta, err := rundir.ReadMeta(run)
	if err != nil {
		return nil, "", err
	}
	return meta, RunID(meta, b), nil
}

// present says whether the run id is in the dataset in dir: its runs row,
// written last, is.
func present(dir, id string) (bool, error) {
	_, err := os.Stat(filepath.Join(Partition(dir, Runs, id), FileName))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

// writer writes the tables of one run.
type writer struct {
	ctx context.Context
	dir string
	id  string
	run string
	src *store.Run
	sum *sweep.Row
	rep *stats.Report
}

// table writes one table of the run into its partition, replacing what
// an interrupted Add left there.
func (w *writer) table(name string) error {
	return writePartition(w.dir, name, w.id, func(f io.Writer) error { return w.write(name, f) })
}

// writePartition writes the file of table's partition of run id in dir.
func writePartition(dir, table, id string, write func(io.Writer) error) error {
	part := Partition(dir, table, id)
	if err := os.RemoveAll(part); err != nil {
		return err
	}
	if err := os.MkdirAll(part, 0o755); err != nil {
		return err
	}
	return atomicfile.Write(filepath.Join(part, FileName), 0o644, false, write)
}

func (w *writer) write(name string, f io.Writer) error {
	status := w.src.Meta.Status()
	// Every column stays, NA where the run did not measure it, so that
	// the files of runs of any tier share one schema; why is in the
	// runs table's na.
	na := unmeasured(w.src)
	switch name {
	case Tokens:
		return output.Tokens(w.ctx, w.src.Store, f, format, status, na)
	case TokenTensors:
		return output.TokenTensors(w.ctx, w.src.Store, f, format, status, na)
	case Experts:
		rows, err := w.src.Store.Query(store.Query{By: "expert"})
		if err != nil {
			return err
		}
		return output.QueryRows(f, rows, "expert", format, status, na)
	case Stats:
		return output.StatsLong(f, format, w.rep)
	case ExpertActivations, CacheSimLayers, Residency, IOShapeTokens:
		return longTable(f, w.rep, name)
	}
	return w.runRow(f, na, w.sum)
}
