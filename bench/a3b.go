package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/rundir"
)

// The a3b section (issue 33) records a study's run at a study's size, on
// demand (it writes a 16 GiB model once, and its run reads hundreds of
// GiB): llama.cpp's llama-completion generating a3bTokens tokens on
// Qwen3-30B-A3B's shape in Q4_K (synth --like qwen3-30b-a3b) from a cold
// cache under a3bMemLimit, then every analysis command on the run.
const (
	a3bTokens   = 64
	a3bMemLimit = "4GiB"
	// a3bIngestShare is issue 33's bound on the ingest's time as a share
	// of the record's wall time.
	a3bIngestShare = 0.02
	// a3bQueryExpertS bounds `query --by expert`, seconds.
	a3bQueryExpertS = 0.1
)

// a3bModel writes the model into the work directory once; a file of the
// layout's size is the one synth wrote (its bytes depend on the spec
// alone), and is reused.
func a3bModel(cfg Config) (string, gguf.SynthSpec, error) {
	spec, err := gguf.SynthLike("qwen3-30b-a3b")
	if err != nil {
		return "", spec, err
	}
	spec.Seed = 1
	spec = spec.WithDefaults()
	f, err := spec.Layout()
	if err != nil {
		return "", spec, err
	}
	path := filepath.Join(cfg.WorkDir, "qwen3-30b-a3b-q4_k.gguf")
	if fi, err := os.Stat(path); err == nil && fi.Size() == f.Size {
		return path, spec, nil
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return "", spec, err
	}
	logf(cfg, "a3b: writing %s (%.1f GiB)", path, float64(f.Size)/(1<<30))
	_, err = gguf.CreateSynth(path, spec)
	return path, spec, err
}

// A3B adds the a3b section's figures: lost events, the decode picks
// against decode tokens × layers × experts used, the record's wall time
// and the ingest's share of it, and each analysis command's peak RSS and
// time.
func A3B(r *Report, cfg Config) {
	const sec = "a3b"
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	model, spec, err := a3bModel(cfg)
	if err != nil {
		r.NA(sec, "all figures", "", "writing the model: "+orNA(err))
		return
	}
	comp := filepath.Join(filepath.Dir(cfg.LlamaBench), "llama-completion")
	dir := filepath.Join(cfg.WorkDir, "a3b-run")
	out := filepath.Join(cfg.WorkDir, "a3b-out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		r.NA(sec, "all figures", "", orNA(err))
		return
	}
	// No repack: on x86 with AVX2 llama.cpp would copy the Q4_K weights
	// into anonymous memory at load, 16 GiB under a 4 GiB limit.
	logf(cfg, "a3b: recording %d tokens of llama-completion cold under %s", a3bTokens, a3bMemLimit)
	_, recSecs, err := child(cfg, "record", "-o", dir, "-f", "--cold", "--mem-limit", a3bMemLimit, "--no-ingest", "--",
		comp, "-m", model, "-p", "the quick brown fox", "-n", strconv.Itoa(a3bTokens), "-no-cnv", "--no-warmup",
		"--ignore-eos", "-nr", "-t", strconv.Itoa(cfg.Threads), "-c", "256", "--temp", "0")
	if err != nil {
		r.NA(sec, "all figures", "", "recording: "+orNA(err))
		return
	}
	r.Add(sec, fmt.Sprintf("record wall time, %d tokens", a3bTokens), "s", []float64{recSecs}, "")
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		r.NA(sec, "all figures", "", orNA(err))
		return
	}
	var lost, records float64
	for _, n := range m.Lost {
		lost += float64(n)
	}
	for _, n := range m.Counts {
		records += float64(n)
	}
	r.Add(sec, "records", "count", []float64{records}, "")
	r.Add(sec, "lost events", "count", []float64{lost}, "")
	r.goal("<=", 0, "max")
	var disk float64
	for i, b := range m.DiskBefore {
		if i < len(m.DiskAfter) && m.DiskAfter[i].Name == b.Name {
			disk += float64(m.DiskAfter[i].SectorsRead-b.SectorsRead) * 512
		}
	}
	r.Add(sec, "device bytes read (diskstats, every process)", "GiB", []float64{disk / (1 << 30)}, "")
	if m.BlockRequeues != nil {
		r.Add(sec, "block requests requeued", "count", []float64{float64(*m.BlockRequeues)}, "")
	}

	cmds := append([]scaleCommand{{"query --by expert", func(dir, _ string) []string {
		return []string{"query", "-i", dir, "--by", "expert", "--format", "json"}
	}}}, scaleCommands...)
	// ingest first: the others read its store.
	cmds[0], cmds[1] = cmds[1], cmds[0]
	for _, c := range cmds {
		logf(cfg, "a3b: iocorr %s", c.name)
		rss, secs, err := child(cfg, c.args(dir, out)...)
		if err != nil {
			r.NA(sec, c.name, "", orNA(err))
			if c.name == "ingest" {
				return
			}
			continue
		}
		r.Add(sec, c.name+" peak RSS", "MiB", []float64{rss}, "")
		r.goal("<=", scaleBound, "max")
		r.Add(sec, c.name+" time", "s", []float64{secs}, "")
		switch c.name {
		case "ingest":
			r.Add(sec, "ingest time / record wall time", "ratio", []float64{secs / recSecs}, "")
			r.goal("<=", a3bIngestShare, "max")
		case "query --by expert":
			r.goal("<=", a3bQueryExpertS, "max")
		}
	}
	a3bPicks(r, sec, dir, spec)
}

// a3bPicks adds the decode picks and what they must equal: every decode
// token routes every layer's one row to ExpertsUsed experts.
func a3bPicks(r *Report, sec, dir string, spec gguf.SynthSpec) {
	st, err := index.Open(dir)
	if err != nil {
		r.NA(sec, "decode picks", "", orNA(err))
		return
	}
	defer st.Close()
	if na := st.Summary.PicksNA(); na != "" {
		r.NA(sec, "decode picks", "", na)
		return
	}
	tokens, err := st.Query(index.Query{By: "token", Phase: "decode"})
	if err != nil {
		r.NA(sec, "decode picks", "", orNA(err))
		return
	}
	experts, err := st.Query(index.Query{By: "expert", Phase: "decode"})
	if err != nil {
		r.NA(sec, "decode picks", "", orNA(err))
		return
	}
	var picks float64
	for _, e := range experts {
		picks += float64(e.Selected)
	}
	want := float64(len(tokens) * spec.Layers * spec.ExpertsUsed)
	r.Add(sec, "decode tokens", "count", []float64{float64(len(tokens))}, "")
	r.goalWithin(a3bTokens-1, a3bTokens-1, "median")
	r.Add(sec, fmt.Sprintf("decode picks / (decode tokens × %d layers × %d used)", spec.Layers, spec.ExpertsUsed), "ratio", []float64{picks / want}, "")
	r.goalWithin(1, 1, "median")
}
