package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/llmtest"
)

// BenchmarkTracingOverhead measures llama.cpp's decode speed untraced,
// under `iocorr record` with the default probes, and with --probe ops.
// The three run interleaved, round by round, so that whatever else the
// machine does affects all of them alike; the figures are medians and the
// overheads are ratios from the same rounds.
func BenchmarkTracingOverhead(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	llmtest.Require(b)
	model := llmtest.Model(b, gguf.SynthSpec{Layers: 8, Embd: 1024, FF: 2816, Heads: 16, Type: llmtest.WeightType})
	const tokens = 48
	modes := []struct {
		name  string
		extra []string // nil: untraced
	}{
		{"untraced", nil},
		{"graph", []string{}},
		{"ops", []string{"--probe", "ops"}},
	}
	speeds := map[string][]float64{}
	for i := 0; i < b.N; i++ {
		for _, m := range modes {
			cmd := llmtest.Command(context.Background(), model, llmtest.Options{Tokens: tokens, Threads: 2, JSON: true})
			var out string
			if m.extra == nil {
				o, err := cmd.Output()
				if err != nil {
					b.Fatalf("untraced run: %v", err)
				}
				out = string(o)
			} else {
				dir := filepath.Join(b.TempDir(), "run")
				args := append([]string{"record", "-o", dir, "--no-ingest"}, m.extra...)
				o, errOut, err := runCmd(b, append(append(args, "--"), cmd.Args...)...)
				if err != nil {
					b.Fatalf("%s run: %v\n%s", m.name, err, errOut)
				}
				out = o
			}
			var rep struct {
				TokensPerS float64 `json:"tokens_per_s"`
			}
			line := strings.TrimSpace(out)
			if i := strings.LastIndex(line, "\n"); i >= 0 {
				line = line[i+1:]
			}
			if err := json.Unmarshal([]byte(line), &rep); err != nil || rep.TokensPerS <= 0 {
				b.Fatalf("%s: driver said %q: %v", m.name, out, err)
			}
			speeds[m.name] = append(speeds[m.name], rep.TokensPerS)
		}
	}
	med := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	base := med(speeds["untraced"])
	for _, m := range modes {
		b.ReportMetric(med(speeds[m.name]), "tok/s-"+m.name)
	}
	b.ReportMetric(med(speeds["graph"])/base, "ratio-graph/untraced")
	b.ReportMetric(med(speeds["ops"])/base, "ratio-ops/untraced")
}
