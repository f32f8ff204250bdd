package bench

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/store"
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

// a3bSpec is the model's spec: Qwen3-30B-A3B's shape in Q4_K.
func a3bSpec() (gguf.SynthSpec, error) {
	spec, err := gguf.SynthLike("qwen3-30b-a3b")
	if err != nil {
		return spec, err
	}
	spec.Seed = 1
	return spec.WithDefaults(), nil
}

// a3bModel writes the model into the work directory once; a file of the
// layout's size is the one synth wrote (its bytes depend on the spec
// alone), and is reused.
func a3bModel(cfg Config, spec gguf.SynthSpec) (string, error) {
	f, err := spec.Layout()
	if err != nil {
		return "", err
	}
	path := filepath.Join(cfg.WorkDir, "qwen3-30b-a3b-q4_k.gguf")
	if fi, err := os.Stat(path); err == nil && fi.Size() == f.Size {
		return path, nil
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return "", err
	}
	logf(cfg, "a3b: writing %s (%.1f GiB)", path, float64(f.Size)/(1<<30))
	_, err = gguf.CreateSynth(path, spec)
	return path, err
}

// A3B adds the a3b section's figures: lost events, the decode picks
// against decode tokens × layers × experts used, the record's wall time
// and the ingest's share of it, and each analysis command's peak RSS and
// time. With cfg.A3BRun it records nothing: the run there is measured,
// its record wall time the recorder's own (meta.json's start to end).
func A3B(r *Report, cfg Config) {
	const sec = "a3b"
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	spec, err := a3bSpec()
	if err != nil {
		r.NA(sec, "all figures", "", orNA(err))
		return
	}
	dir := filepath.Join(cfg.WorkDir, "a3b-run")
	out := filepath.Join(cfg.WorkDir, "a3b-out")
	if err := os.MkdirAll(out, 0o755); err != nil {
		r.NA(sec, "all figures", "", orNA(err))
		return
	}
	var recSecs float64
	if cfg.A3BRun == "" {
		if recSecs, err = a3bRecord(cfg, spec, dir); err != nil {
			r.NA(sec, "all figures", "", orNA(err))
			return
		}
		r.Add(sec, fmt.Sprintf("record wall time, %d tokens", a3bTokens), "s", []float64{recSecs}, "")
	}
	if cfg.A3BRun != "" {
		dir = cfg.A3BRun
	}
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		r.NA(sec, "all figures", "", orNA(err))
		return
	}
	if cfg.A3BRun != "" {
		recSecs = m.End.Sub(m.Start).Seconds()
		r.Add(sec, "record wall time, meta.json's start to end", "s", []float64{recSecs}, "")
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
	if !a3bAnalysis(r, cfg, sec, dir, out, recSecs) {
		return
	}
	a3bPicks(r, sec, dir, spec)
}

// a3bRecord writes the model (once) and records the run into dir; it
// returns the record's wall time, s.
func a3bRecord(cfg Config, spec gguf.SynthSpec, dir string) (float64, error) {
	model, err := a3bModel(cfg, spec)
	if err != nil {
		return 0, fmt.Errorf("writing the model: %w", err)
	}
	comp := filepath.Join(filepath.Dir(cfg.LlamaBench), "llama-completion")
	// No repack: on x86 with AVX2 llama.cpp would copy the Q4_K weights
	// into anonymous memory at load, 16 GiB under a 4 GiB limit.
	logf(cfg, "a3b: recording %d tokens of llama-completion cold under %s", a3bTokens, a3bMemLimit)
	_, secs, err := child(cfg, "record", "-o", dir, "-f", "--cold", "--mem-limit", a3bMemLimit, "--no-ingest", "--",
		comp, "-m", model, "-p", "the quick brown fox", "-n", strconv.Itoa(a3bTokens), "-no-cnv", "--no-warmup",
		"--ignore-eos", "-nr", "-t", strconv.Itoa(cfg.Threads), "-c", "256", "--temp", "0")
	if err != nil {
		return 0, fmt.Errorf("recording: %w", err)
	}
	return secs, nil
}

// a3bCommands are every analysis command of a run: the ingest first (the
// others read its store), a query by each grouping, stats, the report and
// every export of one run, in each format that takes another path.
func a3bCommands() []scaleCommand {
	cmds := []scaleCommand{{"ingest", func(dir, _ string) []string { return []string{"ingest", "--force", dir} }}}
	for _, by := range store.GroupBys {
		cmds = append(cmds, scaleCommand{"query --by " + by, func(dir, _ string) []string {
			return []string{"query", "-i", dir, "--by", by, "--format", "json"}
		}})
	}
	to := func(name string, args ...string) scaleCommand {
		return scaleCommand{name, func(dir, out string) []string {
			a := append([]string{"export", "-i", dir}, args[:len(args)-1]...)
			return append(a, "-o", filepath.Join(out, args[len(args)-1]))
		}}
	}
	return append(cmds,
		scaleCommand{"stats", func(dir, _ string) []string { return []string{"stats", "-i", dir} }},
		scaleCommand{"stats --format json", func(dir, _ string) []string { return []string{"stats", "-i", dir, "--format", "json"} }},
		scaleCommand{"report", func(dir, out string) []string {
			return []string{"report", "-i", dir, "-o", filepath.Join(out, "report.html")}
		}},
		to("export faults-per-token", "faults-per-token", "faults-per-token.csv"),
		to("export faults-per-token-tensor csv", "faults-per-token-tensor", "faults-per-token-tensor.csv"),
		to("export faults-per-token-tensor parquet", "faults-per-token-tensor", "--format", "parquet", "faults-per-token-tensor.parquet"),
		to("export events csv", "events", "events.csv"),
		to("export events parquet", "events", "--format", "parquet", "events.parquet"),
		to("export stats parquet", "stats", "--format", "parquet", "stats"),
		to("export perfetto", "perfetto", "trace.pftrace"),
		to("export dataset", "dataset", "dataset"),
	)
}

// a3bAnalysis runs every analysis command on the run in dir, each a child
// of its own, writing into out, and adds its peak RSS (≤ scaleBound) and
// wall time (`query --by expert` ≤ a3bQueryExpertS); false when the
// ingest failed, which leaves nothing to read.
func a3bAnalysis(r *Report, cfg Config, sec, dir, out string, recSecs float64) bool {
	// A dataset gains the run again at each export: start from none.
	if err := os.RemoveAll(filepath.Join(out, "dataset")); err != nil {
		r.NA(sec, "analysis commands", "", orNA(err))
		return false
	}
	for _, c := range a3bCommands() {
		logf(cfg, "a3b: iocorr %s", c.name)
		rss, secs, err := child(cfg, c.args(dir, out)...)
		if err != nil {
			r.NA(sec, c.name, "", orNA(err))
			if c.name == "ingest" {
				return false
			}
			continue
		}
		r.Add(sec, c.name+" peak RSS", "MiB", []float64{rss}, "")
		r.goal("<=", scaleBound, "max")
		r.Add(sec, c.name+" time", "s", []float64{secs}, "")
		switch c.name {
		case "ingest":
			if recSecs <= 0 {
				r.NA(sec, "ingest time / record wall time", "ratio", "the run's meta.json has no start and end")
				break
			}
			r.Add(sec, "ingest time / record wall time", "ratio", []float64{secs / recSecs}, "")
			r.goal("<=", a3bIngestShare, "max")
		case "query --by expert":
			r.goal("<=", a3bQueryExpertS, "max")
		}
	}
	return true
}

// a3bPicks adds the decode picks and what they must equal: every decode
// token routes every layer's one row to ExpertsUsed experts.
func a3bPicks(r *Report, sec, dir string, spec gguf.SynthSpec) {
	run, err := store.OpenRun(dir)
	if err != nil {
		r.NA(sec, "decode picks", "", orNA(err))
		return
	}
	defer run.Close()
	st := run.Store
	// Only the decode calls' picks: a prefill's unseen (op offload, or a
	// probe that missed rows) leaves these exact.
	if na := st.Summary.PicksNAOf(&store.Query{Phase: "decode"}); na != "" {
		r.NA(sec, "decode picks", "", na)
		return
	}
	tokens, err := st.Query(store.Query{By: "token", Phase: "decode"})
	if err != nil {
		r.NA(sec, "decode picks", "", orNA(err))
		return
	}
	experts, err := st.Query(store.Query{By: "expert", Phase: "decode"})
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
