package dataset

import (
	"cmp"
	"encoding/json"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/output"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/sweep"
)

// runColumns are the runs table's: what a study groups its runs by.
var runColumns = []output.Column{
	{Name: "model_file", Type: output.String},
	// model_hash is the SHA-256 of the model's tensor table as meta.json
	// records it (name, type, shape, offset, size of each tensor): two
	// runs of one model file share it, a requantized model differs,
	// and a study's GiB of weights are not read again to tell.
	{Name: "model_hash", Type: output.String},
	{Name: "model_bytes", Type: output.Int64},
	{Name: "architecture", Type: output.String, Nullable: true},
	// quant_type is the tensor type holding most of the model's bytes.
	{Name: "quant_type", Type: output.String},
	{Name: "experts", Type: output.Int32},
	// budget_bytes is the memory limit; null for a run without one.
	{Name: "budget_bytes", Type: output.Int64, Nullable: true},
	{Name: "tier", Type: output.String},
	{Name: "probe_set", Type: output.String},
	{Name: "kernel", Type: output.String},
	// llama_build names each probed library (llama.cpp's) and its ELF
	// build id: FILE:BUILDID, comma-separated.
	{Name: "llama_build", Type: output.String},
	{Name: "host", Type: output.String},
	{Name: "cpu_model", Type: output.String},
	{Name: "start", Type: output.Time},
	{Name: "iocorr_version", Type: output.String},
	{Name: "command", Type: output.String},
	// run_status is rundir.Meta.Status: null for a run recorded to its end.
	{Name: "run_status", Type: output.String, Nullable: true},
	{Name: "decode_tokens", Type: output.Uint64},
	// tokens_per_s is the decode speed (sweep's, from the store).
	{Name: "tokens_per_s", Type: output.Float64, Nullable: true},
	{Name: "bytes_read_per_token", Type: output.Float64, Nullable: true},
	// na is a JSON object: each column NA in this run's rows (of this
	// table or the others) and why.
	{Name: "na", Type: output.String},
	{Name: "run_dir", Type: output.String},
}

// unmeasured is what the run did not measure, its columns kept (NA):
// its counters, and the router's picks (not probed, or of layers no
// probe saw, as query --by expert says).
func unmeasured(m *rundir.Meta, st *index.Store) *output.Unmeasured {
	names := make([]string, len(event.CounterFields))
	for i := range event.CounterFields {
		names[i] = event.CounterFields[i].Name
	}
	picks := m.PicksNA()
	if picks == "" {
		picks = st.Summary.PicksNA()
	}
	return &output.Unmeasured{Counters: m.CountersNA(names), Selected: picks, All: true}
}

// runRow writes the runs table's one row of the run; sum is its sweep
// figures, na what it did not measure.
func (w *writer) runRow(f io.Writer, na *output.Unmeasured, sum *sweep.Row) error {
	m := w.meta
	reasons := output.NewSidecar(w.run, "", na).NA
	for k, v := range sum.NA {
		reasons[k] = v
	}
	var model rundir.ModelFile
	if len(m.Models) > 0 {
		model = m.Models[0]
	} else {
		reasons["model_file"] = "the run mapped no model file"
	}
	arch := output.NA()
	if f, err := gguf.Open(model.Path); err != nil {
		reasons["architecture"] = "the model file could not be read when the run was added: " + err.Error()
	} else {
		arch = output.Text(f.Architecture())
	}
	budget := output.Num(m.Controls.MemLimit)
	if m.Controls.MemLimit <= 0 {
		budget = output.NA()
	}
	status := output.NA()
	if s := m.Status(); s != "" {
		status = output.Text(s)
	}
	fl := func(v *float64) output.Cell {
		if v == nil {
			return output.NA()
		}
		return output.Float(*v)
	}
	naJSON, err := json.Marshal(reasons)
	if err != nil {
		return err
	}
	rw := output.New(f, output.Parquet, runColumns)
	rw.SetStatus(m.Status())
	err = rw.Row(output.Text(model.Path), output.Text(modelHash(&model)), output.Num(model.Size), arch,
		output.Text(quantType(&model)), output.Num(maxExperts(&model)), budget, output.Text(m.Tier), output.Text(m.ProbeSet),
		output.Text(m.Host.Kernel), output.Text(llamaBuild(m)), output.Text(m.Host.Hostname), output.Text(m.Host.CPUModel),
		output.Num(m.Start.UnixMicro()), output.Text(m.Version), output.Text(strings.Join(m.Command, " ")), status,
		output.Num(sum.Decode), fl(sum.TokensPerS), fl(sum.BytesPerToken), output.Text(string(naJSON)), output.Text(w.run))
	if err != nil {
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
