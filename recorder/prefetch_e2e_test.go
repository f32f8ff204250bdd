package recorder_test

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/internal/units"
	"github.com/iocorr/iocorr/pin"
	"github.com/iocorr/iocorr/prefetch"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// TestPrefetchAsksForThePickedExpertsSlicesBeforeTheirUse runs
// testdata/routeoracle — llama.cpp's own evaluation callback printing
// every MoE layer's picks — under `iocorr prefetch` (recorder.Prefetch:
// only the hooks the prefetcher acts on, no recording kept), from a cold
// cache under a memory limit. The expert slices the prefetcher asked for
// are, per llama_decode call and layer, exactly those of the experts
// llama.cpp picked, as the GGUF lays them out; the kernel was asked for
// pages of them; and most of what was asked was in the page cache by the
// time the command used it (no major fault on it).
func TestPrefetchAsksForThePickedExpertsSlicesBeforeTheirUse(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	oracle := llmtest.BuildRouteOracle(t)
	spec := archSpec(gguf.ArchQwen3MoE)
	model := llmtest.Quantized(t, llmtest.Model(t, spec), "Q6_K")
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	limit := limitBytes(t)
	type slice struct {
		token    uint32
		layer    int
		off, end int64
	}
	var asked []slice
	var out [2]*os.File
	for i := range out {
		if out[i], err = os.CreateTemp(t.TempDir(), "out"); err != nil {
			t.Fatal(err)
		}
		defer out[i].Close()
	}
	o := recorder.Options{Argv: llmtest.RouteOracleArgs(oracle, model, archTokens, true), Cold: true, MemLimit: limit, Stdout: out[0], Stderr: out[1],
		Prefetch: &prefetch.Config{Issued: func(is prefetch.Issue) {
			asked = append(asked, slice{is.Token, is.Layer, is.Off, is.Off + is.Len})
		}}}
	rep, res, err := recorder.Prefetch(t.Context(), o)
	stdout, _ := os.ReadFile(out[0].Name())
	stderr, _ := os.ReadFile(out[1].Name())
	if err != nil || rep == nil {
		t.Fatalf("prefetch: %v\n%s", err, stderr)
	}
	routing, err := llmtest.ParseRouting(stdout)
	if err != nil {
		t.Fatalf("the oracle's output: %v\n%s", err, stdout)
	}
	var want []slice
	for call, c := range routing.Calls {
		for layer, rows := range c.Rows {
			picked := map[int]bool{}
			for _, ids := range rows {
				for _, id := range ids {
					picked[int(id)] = true
				}
			}
			for _, tn := range f.TensorsByOffset() {
				if tn.Layer != layer || tn.Experts == 0 {
					continue
				}
				for e := range picked {
					a, b := tn.ExpertRange(e)
					want = append(want, slice{call, layer, a, b})
				}
			}
		}
	}
	order := func(a, b slice) int {
		return cmp.Or(cmp.Compare(a.token, b.token), cmp.Compare(a.layer, b.layer), cmp.Compare(a.off, b.off), cmp.Compare(a.end, b.end))
	}
	slices.SortFunc(want, order)
	slices.SortFunc(asked, order)
	if !slices.Equal(asked, want) {
		t.Errorf("asked for %d slices, llama.cpp's picks make %d:\n%v\nwant\n%v", len(asked), len(want), head(asked), head(want))
	}
	if rep.OutcomeNA != "" || rep.AskedBytes == 0 || rep.Failed != 0 || len(rep.Errors) > 0 {
		t.Fatalf("nothing to hold to the faults: %+v\n%s", rep, stderr)
	}
	if rep.Bytes != rep.ResidentBytes+rep.OverWindowBytes+rep.DroppedBytes+rep.AskedBytes || rep.AskedBytes != rep.ArrivedBytes+rep.LateBytes+rep.EvictedUnusedBytes {
		t.Errorf("the report's parts do not add up: %+v", rep)
	}
	// The faults the outcomes are told by are the command's: no more
	// than its rusage counts.
	if rep.ModelMajorFaults > uint64(res.Meta.Child.MajFlt) {
		t.Errorf("%d major faults in the model seen, the command's rusage counts %d", rep.ModelMajorFaults, res.Meta.Child.MajFlt)
	}
	if 2*rep.ArrivedBytes < rep.AskedBytes {
		t.Errorf("%d of %d bytes asked arrived before their use: %+v", rep.ArrivedBytes, rep.AskedBytes, rep)
	}
	// Only what it acts on: the major faults, not the minor ones (a
	// program run and a record each, ~1,500 a decode token).
	var perf []string
	for _, p := range res.Meta.Probes {
		if p.Kind == "perf_event" && p.Error == "" {
			perf = append(perf, p.Target)
		}
	}
	if !slices.Contains(perf, "page-faults-major") || slices.Contains(perf, "page-faults-minor") {
		t.Errorf("the prefetcher's session attached the perf events %v, want the major faults' and not the minor faults'", perf)
	}
	t.Logf("%d slices asked for; %s", len(asked), prefetch.Summary(rep))
}

// head is the first few of s, printed.
func head[T any](s []T) string { return fmt.Sprint(s[:min(len(s), 8)]) }

// TestRecordPrefetchPutsItsReportInTheRun records the routing oracle with
// --prefetch, cold under a memory limit: meta.json carries the
// prefetcher's report, which asked for pages, and its parts add up; the
// run is ingested as any other.
func TestRecordPrefetchPutsItsReportInTheRun(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	oracle := llmtest.BuildRouteOracle(t)
	model := llmtest.Quantized(t, llmtest.Model(t, archSpec(gguf.ArchQwen3MoE)), "Q6_K")
	dir := filepath.Join(t.TempDir(), "run")
	rec := rectest.Record(t, dir, rectest.Options{Cold: true, MemLimit: archMemLimit, Set: func(o *recorder.Options) { o.Prefetch = &prefetch.Config{} }},
		llmtest.RouteOracleArgs(oracle, model, archTokens, true)...)
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	rep := m.Controls.Prefetched
	if rep == nil {
		t.Fatalf("meta.json has no prefetch report\n%s", rec.Stderr)
	}
	if rep.Picks != uint64(archTokens*archSpec(gguf.ArchQwen3MoE).Layers) || rep.AskedBytes == 0 || rep.OutcomeNA != "" || len(rep.Errors) > 0 ||
		rep.AskedBytes != rep.ArrivedBytes+rep.LateBytes+rep.EvictedUnusedBytes || rep.Window != limitBytes(t)/4 {
		t.Errorf("report %+v", rep)
	}
	if rep.ModelMajorFaults > uint64(m.Child.MajFlt) {
		t.Errorf("%d major faults in the model seen, the command's rusage counts %d", rep.ModelMajorFaults, m.Child.MajFlt)
	}
}

// limitBytes is archMemLimit in bytes.
func limitBytes(t *testing.T) int64 {
	n, err := units.ParseSize(archMemLimit)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPrefetchWithAPinAsksForNothingPinned runs the routing oracle under
// `iocorr prefetch --pin` of a plan holding layer 0's expert tensors
// whole: the pinned slices are in the page cache for the whole run, so of
// every layer-0 slice the picks name nothing is asked of the kernel, while
// the other layers' slices are; the default window is a quarter of what
// the pin leaves of the budget.
func TestPrefetchWithAPinAsksForNothingPinned(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	oracle := llmtest.BuildRouteOracle(t)
	model := llmtest.Quantized(t, llmtest.Model(t, archSpec(gguf.ArchQwen3MoE)), "Q6_K")
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	// Well below the 44.5 MB model with what the command needs beside it, so
	// that the unpinned layers cannot all stay cached: at 48 MiB the
	// loader's read of the whole file sometimes left every slice cached
	// at its pick, and nothing was asked (2 runs of 4).
	const limit = 32 << 20
	var pinned []*gguf.Tensor
	for _, tn := range f.TensorsByOffset() {
		if tn.Layer == 0 && tn.Experts > 0 {
			pinned = append(pinned, tn)
		}
	}
	plan, err := pin.WholeTensors(model, pinned, limit)
	if err != nil {
		t.Fatal(err)
	}
	planPath := filepath.Join(t.TempDir(), "plan.json")
	if err := plan.Write(planPath); err != nil {
		t.Fatal(err)
	}
	asked := map[int]int64{}
	o := recorder.Options{Argv: llmtest.RouteOracleArgs(oracle, model, archTokens, true), Cold: true, MemLimit: limit, Pin: planPath,
		Stdout: io.Discard, Stderr: io.Discard,
		Prefetch: &prefetch.Config{Issued: func(is prefetch.Issue) { asked[is.Layer] += is.Asked }}}
	rep, res, err := recorder.Prefetch(t.Context(), o)
	if err != nil || rep == nil {
		t.Fatalf("prefetch --pin: %v", err)
	}
	held := res.Meta.Controls.Pinned
	if held == nil || held.Bytes == 0 {
		t.Fatalf("nothing was pinned: %+v", res.Meta.Controls)
	}
	if asked[0] != 0 {
		t.Errorf("%d bytes of pinned layer 0 asked for", asked[0])
	}
	if asked[1]+asked[2]+asked[3] == 0 {
		t.Errorf("nothing of the unpinned layers asked for: %v (report %+v)", asked, rep)
	}
	t.Logf("asked by layer %v; %d of %d bytes of the picks cached already", asked, rep.ResidentBytes, rep.Bytes)
	if want := (limit - held.Bytes) / 4; rep.Window != want {
		t.Errorf("window %d, want a quarter of the %d bytes the pin leaves", rep.Window, limit-held.Bytes)
	}
}

// TestPrefetchReleaseAdvisesOnlyThePagesItBroughtIn runs the routing
// oracle under `iocorr prefetch --release`, cold under the limit: the
// kernel took MADV_COLD for pages at the layers' ends, never for more
// than the prefetcher brought in (what the cache held at the ask is not
// released), with no error, and llama.cpp ran to its routing output.
func TestPrefetchReleaseAdvisesOnlyThePagesItBroughtIn(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	oracle := llmtest.BuildRouteOracle(t)
	model := llmtest.Quantized(t, llmtest.Model(t, archSpec(gguf.ArchQwen3MoE)), "Q6_K")
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	o := recorder.Options{Argv: llmtest.RouteOracleArgs(oracle, model, archTokens, true), Cold: true, MemLimit: limitBytes(t), Stdout: out, Stderr: io.Discard,
		Prefetch: &prefetch.Config{Release: true}}
	rep, _, err := recorder.Prefetch(t.Context(), o)
	if err != nil || rep == nil {
		t.Fatalf("prefetch --release: %v", err)
	}
	if !rep.Release || len(rep.Errors) > 0 || rep.AskedBytes == 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.ReleasedBytes <= 0 || rep.ReleasedBytes > rep.AskedBytes {
		t.Errorf("released %d bytes of the %d it brought in; want some, and no more", rep.ReleasedBytes, rep.AskedBytes)
	}
	stdout, _ := os.ReadFile(out.Name())
	routing, err := llmtest.ParseRouting(stdout)
	if err != nil || len(routing.Calls) == 0 {
		t.Fatalf("the oracle's output (%v): %d calls routed\n%s", err, len(routing.Calls), stdout)
	}
	t.Log(prefetch.Summary(rep))
}
