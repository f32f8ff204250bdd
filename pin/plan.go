// Package pin holds a plan's file ranges in RAM for the length of a
// command: a helper process, made a member of the command's own memory
// cgroup before it reads a byte, reads and mlocks the ranges, so the
// pages are charged to the command's budget as llama.cpp's --mlock would
// charge them, and holds them until the command has ended. It is the
// write side's: `iocorr pin` and `record --pin` use it. The plan itself
// (plan.json) is written by `iocorr plan` (package predict); this package
// owns its format and its checks against the model file.
package pin

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/atomicfile"
	"github.com/iocorr/iocorr/internal/kernel"
)

// Plan is plan.json: what to pin of which model file, under which budget,
// and what the prediction expects of it.
type Plan struct {
	Model  ModelID `json:"model"`
	Budget int64   `json:"budget_bytes"`
	// Pinned is the bytes of the ranges (pages they touch, rounded to the
	// page: what mlock holds).
	Pinned int64   `json:"pinned_bytes"`
	Ranges []Range `json:"ranges"`
	// Recommendation is "pin" or "pin nothing"; Reason says why.
	Recommendation string `json:"recommendation"`
	Reason         string `json:"reason"`
	// Expected holds the prediction's decode figures per policy (kernel,
	// plan) at the budget.
	Expected map[string]map[string]*float64 `json:"expected"`
	// ExpectedNA says why a figure of Expected is null, by policy/figure.
	ExpectedNA map[string]string `json:"expected_na,omitempty"`
	// ReadaheadBytes is the read-around window the prediction used (0 in
	// plans written before it was recorded): a pin's predicted bytes
	// depend on it where the kernel's alone hardly do.
	ReadaheadBytes int64 `json:"readahead_bytes,omitempty"`
	// Prefetch is the advice on a prefetcher at the budget (nil in plans
	// written before it was kept): programs read it here, not from the
	// lines plan prints.
	Prefetch *Prefetch `json:"prefetch,omitempty"`
	// Readahead is the advice on the model disk's read-ahead at the
	// budget (nil in plans written before it was kept).
	Readahead *Readahead `json:"readahead,omitempty"`
}

// Readahead says whether another read_ahead_kb of the model's disk is
// predicted to pay at a plan's budget: the fault read-around of a mapped
// model is twice it (llama.cpp advises the file POSIX_FADV_SEQUENTIAL),
// and under a budget that read-around can be most of what a token reads.
type Readahead struct {
	// CurrentKB is the disk's read_ahead_kb the run was recorded with (0
	// where the run did not record it).
	CurrentKB uint64 `json:"current_kb"`
	// KB is the read_ahead_kb recommended, 0 for none (keep CurrentKB).
	KB uint64 `json:"kb"`
	// Speedup and BytesRatio are the predicted decode tokens/s and bytes
	// per token at KB over those at CurrentKB, in the worse of the run's
	// modes (nil without a recommendation).
	Speedup    *float64 `json:"speedup,omitempty"`
	BytesRatio *float64 `json:"bytes_ratio,omitempty"`
	// Command sets it ("" for none): it must run before the command opens
	// the model, whose file keeps the window it was opened with.
	Command string `json:"command"`
	Reason  string `json:"reason"`
	// Prefetch is the advice on a prefetcher at KB (nil without a
	// recommendation): Plan.Prefetch's is at CurrentKB.
	Prefetch *Prefetch `json:"prefetch,omitempty"`
}

// Prefetch says whether a prefetcher (iocorr prefetch) pays at a plan's
// budget, and how to run it.
type Prefetch struct {
	// Policy is predict's policy recommended (prefetch-experts or
	// prefetch-both), "" for none.
	Policy string `json:"policy"`
	// Layers: it asks for the next layer's dense weights too (--layers).
	Layers bool `json:"layers"`
	// WindowBytes is the most bytes its requests hold in flight at once
	// (--window).
	WindowBytes int64 `json:"window_bytes"`
	// Release: it releases the pages it brought in once their layer used
	// them (--release).
	Release bool `json:"release,omitempty"`
	// Command is the command line that runs it ("" for none).
	Command string `json:"command"`
	Reason  string `json:"reason"`
}

// Range is one pinned range of the file: a whole tensor (Expert -1) or
// one expert's slice of an *_exps tensor.
type Range struct {
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	Tensor string `json:"tensor"`
	Expert int    `json:"expert"`
}

// ModelID names a model file: its path and size, and its GGUF identity
// (the tensor count and a SHA-256 of its tensor table: each tensor's name,
// absolute offset and size, by offset).
type ModelID struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	Tensors int    `json:"tensors"`
	Hash    string `json:"tensor_table_sha256"`
}

// TensorEntry is one row of the tensor table the identity hashes.
type TensorEntry struct {
	Name         string
	Offset, Size int64
}

// Identify makes a model's identity from its tensor table.
func Identify(path string, size int64, ts []TensorEntry) ModelID {
	ts = slices.Clone(ts)
	slices.SortFunc(ts, func(a, b TensorEntry) int {
		return cmp.Or(cmp.Compare(a.Offset, b.Offset), cmp.Compare(a.Name, b.Name))
	})
	h := sha256.New()
	for _, t := range ts {
		h.Write([]byte(t.Name + " " + strconv.FormatInt(t.Offset, 10) + " " + strconv.FormatInt(t.Size, 10) + "\n"))
	}
	return ModelID{Path: path, Size: size, Tensors: len(ts), Hash: hex.EncodeToString(h.Sum(nil))}
}

// IdentifyFile reads a GGUF file's header and makes its identity.
func IdentifyFile(path string) (ModelID, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return ModelID{}, fmt.Errorf("reading model %s: %w", path, err)
	}
	var ts []TensorEntry
	for _, t := range f.Tensors {
		ts = append(ts, TensorEntry{t.Name, t.FileOffset, t.Size})
	}
	return Identify(path, f.Size, ts), nil
}

// Read reads and checks a plan file.
func Read(path string) (*Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("plan %s is not a plan file: %w", path, err)
	}
	if p.Model.Hash == "" || p.Model.Size <= 0 {
		return nil, fmt.Errorf("plan %s names no model file", path)
	}
	for _, r := range p.Ranges {
		if r.Offset < 0 || r.Length <= 0 || r.Offset+r.Length > p.Model.Size {
			return nil, fmt.Errorf("plan %s: range %d+%d of %s lies outside the model's %d bytes", path, r.Offset, r.Length, r.Tensor, p.Model.Size)
		}
	}
	return &p, nil
}

// Write writes the plan to path.
func (p *Plan) Write(path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, 0o644, true, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// WholeTensors is a plan to pin the tensors of the model file at path
// whole, under budget: what a plan names when it is written by hand rather
// than predicted (the tests' plans).
func WholeTensors(path string, tensors []*gguf.Tensor, budget int64) (*Plan, error) {
	id, err := IdentifyFile(path)
	if err != nil {
		return nil, err
	}
	p := &Plan{Model: id, Budget: budget, Recommendation: "pin"}
	for _, tn := range tensors {
		p.Ranges = append(p.Ranges, Range{Offset: tn.FileOffset, Length: tn.Size, Tensor: tn.Name, Expert: -1})
	}
	p.Pinned = PageBytes(p.Spans())
	return p, nil
}

// Spans lists the ranges as (offset, length) pairs.
func (p *Plan) Spans() [][2]int64 {
	out := make([][2]int64, 0, len(p.Ranges))
	for _, r := range p.Ranges {
		out = append(out, [2]int64{r.Offset, r.Length})
	}
	return out
}

// Matches says why the plan is not for the model with identity id ("" when
// it is).
func (p *Plan) Matches(id ModelID) string {
	switch {
	case p.Model.Size != id.Size:
		return fmt.Sprintf("the plan is for another model file (%d bytes, %s), %s has %d", p.Model.Size, p.Model.Path, id.Path, id.Size)
	case p.Model.Tensors != id.Tensors || p.Model.Hash != id.Hash:
		return fmt.Sprintf("the plan is for another model (%d tensors, table %.12s), %s has %d tensors, table %.12s", p.Model.Tensors, p.Model.Hash, id.Path, id.Tensors, id.Hash)
	}
	return ""
}

// PageBytes is what the ranges hold in RAM: their pages, each counted
// once.
func PageBytes(spans [][2]int64) int64 {
	const ps = kernel.PageSize
	type iv struct{ a, b int64 }
	var ivs []iv
	for _, s := range spans {
		ivs = append(ivs, iv{s[0] / ps, (s[0] + s[1] + ps - 1) / ps})
	}
	slices.SortFunc(ivs, func(x, y iv) int { return cmp.Compare(x.a, y.a) })
	var n, end int64
	for _, v := range ivs {
		a := max(v.a, end)
		if v.b > a {
			n += v.b - a
		}
		end = max(end, v.b)
	}
	return n * ps
}
