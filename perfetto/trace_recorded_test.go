//go:build linux

package perfetto_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/wire"
)

// The recorder re-executes this test binary as the held child.
func TestMain(m *testing.M) { rectest.Main(m) }

// A real llama.cpp MoE run under a memory limit, with op probes: every
// token, graph and op is a slice on the decode thread, every fault an
// instant, every block request a slice, and major faults flow into the
// block requests that read their pages.
func TestPerfettoTraceOfARealRunUnderAMemoryLimit(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	const n = 6
	dir := rectest.RecordMoE(t, "ops", n)
	path := exportTrace(t, dir)
	got := checkTrace(t, dir, path)
	t.Logf("trace: %v", got)
	if got["token"] != n || got["graph"] < n || got["op"] < got["graph"] || got["fault"] == 0 || got["block"] == 0 || got["flow"] == 0 {
		t.Errorf("trace holds %s; want %d tokens, a graph per token, ops, faults, block requests and flows", fmt.Sprint(got), n)
	}
}

// With --probe sched a real run under a memory limit shows each traced
// thread's states; the decode thread runs and blocks in D state (its
// faults wait on reads), and its running slices are as many as the
// spool's switches onto it.
func TestPerfettoTraceShowsThreadStatesWithProbeSched(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	dir := rectest.RecordMoE(t, "sched", 4)
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if meta.ProbeSet != "graph,sched" {
		t.Errorf("probe set %q", meta.ProbeSet)
	}
	// The spool's own count of switches onto each traced thread.
	switchIns := map[uint32]int{}
	var decodeTid uint32
	spooltest.Events(t, dir, func(typ uint16, rec []byte) {
		switch uint32(typ) {
		case uint32(wire.EventTypeEV_SCHED):
			e := (*wire.SchedEvent)(unsafe.Pointer(&rec[0]))
			if e.Kind == uint32(wire.SchedKindSCHEDEV_SWITCH) && int(e.NextTgid) == meta.Child.PID {
				switchIns[e.NextTid]++
			}
		case uint32(wire.EventTypeEV_DECODE_BEGIN):
			decodeTid = (*wire.EventHdr)(unsafe.Pointer(&rec[0])).Tid
		}
	})
	path := exportTrace(t, dir)
	checkTrace(t, dir, path)
	d := decodeTrace(t, path)
	running, blocked := map[uint32]int{}, 0
	tidOf := map[uint64]uint32{} // state track → its thread
	for uuid, tr := range d.Tracks {
		if tr.Name == "thread state" {
			parent := d.Tracks[tr.Parent]
			if !parent.Thread {
				t.Fatalf("state track %d is not under a thread track", uuid)
			}
			tidOf[uuid] = parent.TID
		}
	}
	for _, e := range d.Events {
		tid, ok := tidOf[e.Track]
		if !ok || e.Type != 1 {
			continue
		}
		switch e.Name {
		case "running":
			running[tid]++
		case "blocked on I/O (D)":
			if tid == decodeTid {
				blocked++
			}
		}
	}
	if decodeTid == 0 || running[decodeTid] == 0 || blocked == 0 {
		t.Errorf("decode thread %d: %d running slices, %d blocked in D", decodeTid, running[decodeTid], blocked)
	}
	for tid, n := range switchIns {
		if running[tid] != n {
			t.Errorf("thread %d: %d running slices, the spool switched it in %d times", tid, running[tid], n)
		}
	}
}

// A reader making each kind of read call iocorr traces on a model file
// (llmtest.BuildReader) has each call as a slice on the reading thread.
func TestPerfettoTraceHasEveryReadCallAsASlice(t *testing.T) {
	testenv.RequireBPF(t)
	reader := llmtest.BuildReader(t)
	model := llmtest.Model(t, llmtest.PageableMoE)
	f, err := gguf.Open(model)
	if err != nil {
		t.Fatal(err)
	}
	calls := []string{"read", "pread64", "readv", "preadv", "preadv2", "preadv2cur", "uring"}
	argv := []string{reader, model}
	for i, c := range calls {
		argv = append(argv, fmt.Sprintf("%s:%d:%d", c, f.DataOffset+int64(i)*8192, 5000))
	}
	dir := filepath.Join(t.TempDir(), "run")
	rectest.Record(t, dir, rectest.Options{Set: func(o *recorder.Options) { o.Models = []string{model} }}, argv...)
	if got := checkTrace(t, dir, exportTrace(t, dir)); got["read"] != len(calls) {
		t.Errorf("%d read slices in the trace, the reader made %d calls", got["read"], len(calls))
	}
}
