package recorder

import (
	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/ggml"
	"github.com/iocorr/iocorr/rundir"
)

// capabilities is the tracer's capability table as meta.json keeps it.
func capabilities(cs []bpf.CapStatus) []rundir.Capability {
	out := make([]rundir.Capability, len(cs))
	for i, c := range cs {
		out[i] = rundir.Capability{Name: c.Name, Path: c.Path, Primary: c.Primary, Kernel: c.Kernel, Lost: c.Lost, Why: c.Why, Off: c.Off}
	}
	return out
}

// missingCapabilities is ggml.Missing for the probes the tracer tried.
func missingCapabilities(probes []bpf.Probe, searched []string, probeOps, moe bool) []string {
	tried := make([]ggml.Attempt, len(probes))
	for i, p := range probes {
		tried[i] = ggml.Attempt{Symbol: p.Symbol, Attached: p.Error == ""}
	}
	return ggml.Missing(tried, searched, probeOps, moe)
}
