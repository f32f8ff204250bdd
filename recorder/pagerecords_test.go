package recorder

import (
	"io"
	"path/filepath"
	"slices"
	"testing"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/correlate"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/ingest"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// TestPageRunsOfAnMoERunChargeWhatItsFoliosCharge records real llama.cpp
// on an MoE model from a cold cache under a memory limit, with the tracer
// writing each page-cache add and deletion twice into the one ring: in
// the runs it makes by default and as a record per folio. The run is then
// attributed twice, once without the folios and once without the runs:
// with the same faults, blocks, tokens, ops and expert picks, the two must
// charge every tensor, expert and token exactly the same — pages and bytes
// added and evicted, readahead trigger and landed bytes — over several
// decode tokens.
func TestPageRunsOfAnMoERunChargeWhatItsFoliosCharge(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	defer func(f func(bpf.Options) (*bpf.Tracer, error)) { openTracer = f }(openTracer)
	openTracer = func(o bpf.Options) (*bpf.Tracer, error) {
		o.PageRecords = bpf.PageRunsAndFolios
		return bpf.Open(o)
	}
	model := llmtest.Model(t, llmtest.MoE)
	dir := filepath.Join(t.TempDir(), "run")
	cmd := llmtest.Command(t.Context(), model, llmtest.Generation{Tokens: 6, Threads: 2, JSON: true})
	o := options(dir, cmd.Args...)
	o.Stdout, o.Stderr = io.Discard, io.Discard
	o.Cold, o.MemLimit, o.Models, o.RingBufBytes = true, llmtest.MemLimitBytes, []string{model}, bpf.DefaultRingBufBytes
	res, err := Run(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Meta.Finished || res.Meta.Child.ExitCode != 0 {
		t.Fatalf("run finished %v, child %+v", res.Meta.Finished, res.Meta.Child)
	}
	for typ, n := range res.Meta.Lost {
		if n != 0 {
			t.Fatalf("lost %d %s events: the runs and the folios are not of the same events", n, typ)
		}
	}

	sp, err := ingest.OpenSpool(filepath.Join(dir, rundir.SpoolFile))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	var runs, folios [][]byte
	for {
		rec, err := sp.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		rec = slices.Clone(rec)
		switch ingest.RecordType(rec) {
		case uint16(wire.EventTypeEV_PAGE_RUN):
			runs = append(runs, rec)
		case uint16(wire.EventTypeEV_PAGE_ADD), uint16(wire.EventTypeEV_PAGE_DEL):
			folios = append(folios, rec)
		default:
			runs = append(runs, rec)
			folios = append(folios, rec)
		}
	}
	attribute := func(recs [][]byte) *correlate.Result {
		c, err := correlate.NewRun(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Attribute(recs)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	rr, rf := attribute(runs), attribute(folios)
	var sum event.Counters
	for _, a := range rf.Aggs {
		sum.Add(&a.Counters)
	}
	pageRecs := res.Meta.Counts["page_add"] + res.Meta.Counts["page_delete"]
	t.Logf("%d tokens; %d page-cache folios in %d runs (%.0f×); %d pages added, %d evicted, %d trigger bytes",
		len(rf.Tokens), pageRecs, res.Meta.Counts["page_run"], float64(pageRecs)/float64(max(res.Meta.Counts["page_run"], 1)),
		sum.PagesAdded, sum.PagesEvicted, sum.TriggerBytes)
	if len(rf.Tokens) < 6 || sum.PagesEvicted == 0 || sum.TriggerBytes == 0 {
		t.Fatalf("the run did not decode tokens, evict and read ahead under its limit: %d tokens, %+v", len(rf.Tokens), sum)
	}
	if !slices.Equal(rr.Aggs, rf.Aggs) {
		n := 0
		for i := range min(len(rr.Aggs), len(rf.Aggs)) {
			if rr.Aggs[i] != rf.Aggs[i] && n < 10 {
				t.Errorf("runs %+v\nfolios %+v", rr.Aggs[i], rf.Aggs[i])
				n++
			}
		}
		t.Errorf("aggregates differ: %d rows from the runs, %d from the folios", len(rr.Aggs), len(rf.Aggs))
	}
	if !slices.Equal(rr.Tokens, rf.Tokens) {
		t.Errorf("per-token sums differ:\nruns   %+v\nfolios %+v", rr.Tokens, rf.Tokens)
	}
}
