package recorder

import (
	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
)

// missingCapabilities is ggml.Missing for the probes the tracer tried.
func missingCapabilities(probes []bpf.Probe, searched []string, probeOps, moe bool) []string {
	tried := make([]ggml.Attempt, len(probes))
	for i, p := range probes {
		tried[i] = ggml.Attempt{Symbol: p.Symbol, Attached: p.Error == ""}
	}
	return ggml.Missing(tried, searched, probeOps, moe)
}
