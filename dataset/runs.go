package dataset

import (
	"cmp"
	"encoding/json"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/sweep"
)

// runColumns are the runs table's: what a study groups its runs by. A
// run that failed (FailedRun) has a row too, its figures null; of a run
// that never started, only what the sweep knew.
var runColumns = []output.Column{
	{Name: "model_file", Type: output.String, Nullable: true},
	// model_hash is the SHA-256 of the model's tensor table as meta.json
	// records it (name, type, shape, offset, size of each tensor): two
	// runs of one model file share it, a requantized model differs,
	// and a study's GiB of weights are not read again to tell.
	{Name: "model_hash", Type: output.String, Nullable: true},
	{Name: "model_bytes", Type: output.Int64, Nullable: true},
	{Name: "architecture", Type: output.String, Nullable: true},
	// quant_type is the tensor type holding most of the model's bytes.
	{Name: "quant_type", Type: output.String, Nullable: true},
	{Name: "experts", Type: output.Int32, Nullable: true},
	// budget_bytes is the memory limit; null for a run without one.
	{Name: "budget_bytes", Type: output.Int64, Nullable: true},
	{Name: "tier", Type: output.String, Nullable: true},
	{Name: "probe_set", Type: output.String, Nullable: true},
	{Name: "kernel", Type: output.String, Nullable: true},
	// llama_build names each probed library (llama.cpp's) and its ELF
	// build id: FILE:BUILDID, comma-separated.
	{Name: "llama_build", Type: output.String, Nullable: true},
	{Name: "host", Type: output.String, Nullable: true},
	{Name: "cpu_model", Type: output.String, Nullable: true},
	{Name: "start", Type: output.Time},
	{Name: "iocorr_version", Type: output.String, Nullable: true},
	{Name: "command", Type: output.String},
	// run_status is null for a run recorded to its end; else how it
	// ended (rundir.Meta.Status, or the sweep's status of a failed run).
	{Name: "run_status", Type: output.String, Nullable: true},
	{Name: "decode_tokens", Type: output.Uint64, Nullable: true},
	// tokens_per_s is the decode speed (sweep's, from the store).
	{Name: "tokens_per_s", Type: output.Float64, Nullable: true},
	{Name: "bytes_read_per_token", Type: output.Float64, Nullable: true},
	// na is a JSON object: each column NA in this run's rows (of this
	// table or the others) and why.
	{Name: "na", Type: output.String},
	// run_dir is the run directory's absolute path when it was added.
	{Name: "run_dir", Type: output.String},
}

// unmeasured is what the run did not measure, its columns kept (NA):
// its counters, and the router's picks (not probed, or of layers no
// probe saw, as query --by expert says).
func unmeasured(r *store.Run) *output.Unmeasured {
	return &output.Unmeasured{Counters: r.CountersNA(), Selected: r.PicksNA(nil), All: true}
}

// runRow writes the runs table's one row of the run; sum is its sweep
// figures, na what it did not measure.
func (w *writer) runRow(f io.Writer, na *output.Unmeasured, sum *sweep.Row) error {
	reasons := output.NewSidecar(w.run, "", na).NA
	for k, v := range sum.NA {
		reasons[k] = v
	}
	fl := func(v *float64) output.Cell {
		if v == nil {
			return output.NA()
		}
		return output.Float(*v)
	}
	status := output.NA()
	if s := w.src.Meta.Status(); s != "" {
		status = output.Text(s)
	}
	return writeRunRow(f, w.src.Meta, true, w.run, reasons, status, output.Num(sum.Decode), fl(sum.TokensPerS), fl(sum.BytesPerToken))
}

// writeRunRow writes the runs row of the run in run described by m
// (only its start, budget and command when it never started): reasons
// are its NA columns' (to which it adds its own), then its status and
// figures.
func writeRunRow(f io.Writer, m *rundir.Meta, started bool, run string, reasons map[string]string, status output.Cell, figures ...output.Cell) error {
	var model rundir.ModelFile
	if len(m.Models) > 0 {
		model = m.Models[0]
	}
	cells := []output.Cell{output.NA(), output.NA(), output.NA(), output.NA(), output.NA(), output.NA()}
	switch {
	case !started:
		for _, c := range []string{"model_file", "model_hash", "model_bytes", "architecture", "quant_type", "experts",
			"tier", "probe_set", "kernel", "llama_build", "host", "cpu_model", "iocorr_version"} {
			reasons[c] = "the run did not start (see run_status)"
		}
	case len(m.Models) == 0:
		for _, c := range []string{"model_file", "model_hash", "model_bytes", "architecture", "quant_type", "experts"} {
			reasons[c] = "the run mapped no model file"
		}
	default:
		cells = []output.Cell{output.Text(model.Path), output.Text(modelHash(&model)), output.Num(model.Size), output.NA(),
			output.Text(quantType(&model)), output.Num(maxExperts(&model))}
		if f, err := gguf.Open(model.Path); err != nil {
			reasons["architecture"] = "the model file could not be read when the run was added: " + err.Error()
		} else {
			cells[3] = output.Text(f.Architecture())
		}
	}
	budget := output.Num(m.Controls.MemLimit)
	if m.Controls.MemLimit <= 0 {
		budget = output.NA()
	}
	text := func(s string) output.Cell {
		if !started {
			return output.NA()
		}
		return output.Text(s)
	}
	abs, err := filepath.Abs(run)
	if err != nil {
		return err
	}
	cells = append(cells, budget, text(m.Tier), text(m.ProbeSet), text(m.Host.Kernel), text(llamaBuild(m)), text(m.Host.Hostname),
		text(m.Host.CPUModel), output.Num(m.Start.UnixMicro()), text(m.Version), output.Text(strings.Join(m.Command, " ")), status)
	naJSON, err := json.Marshal(reasons)
	if err != nil {
		return err
	}
	cells = append(cells, figures...)
	cells = append(cells, output.Text(string(naJSON)), output.Text(abs))
	rw := output.New(f, format, runColumns)
	rw.SetStatus(m.Status())
	if err := rw.Row(cells...); err != nil {
		return err
	}
	return rw.Close()
}

// modelHash is the SHA-256 of the model's tensor table, in hex.
func modelHash(m *rundir.ModelFile) string {
	b, _ := json.Marshal(m.Tensors) // a slice of plain structs always marshals
	return sha256Hex(b)
}

// quantType is the tensor type that holds the most bytes of the model.
func quantType(m *rundir.ModelFile) string {
	bytes := map[string]int64{}
	for _, t := range m.Tensors {
		bytes[t.Type] += t.Size
	}
	types := slices.Collect(maps.Keys(bytes))
	slices.SortFunc(types, func(a, b string) int {
		return cmp.Or(cmp.Compare(bytes[b], bytes[a]), cmp.Compare(a, b))
	})
	if len(types) == 0 {
		return ""
	}
	return types[0]
}

// maxExperts is the number of experts of the model's expert tensors, 0
// for a dense model.
func maxExperts(m *rundir.ModelFile) int {
	n := 0
	for _, t := range m.Tensors {
		n = max(n, t.Experts)
	}
	return n
}

// llamaBuild names the probed libraries with their build ids.
func llamaBuild(m *rundir.Meta) string {
	var libs []string
	for _, l := range m.Libraries {
		libs = append(libs, filepath.Base(l.Path)+":"+cmp.Or(l.BuildID, "?"))
	}
	slices.Sort(libs)
	return strings.Join(libs, ",")
}
