package perfetto_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"unsafe"

	"github.com/iocorr/iocorr/bpf"
	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/gguf"
	"github.com/iocorr/iocorr/index"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/internal/protowalk"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/spooltest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
	"github.com/iocorr/iocorr/perfetto"
	"github.com/iocorr/iocorr/recorder"
	"github.com/iocorr/iocorr/rundir"
	"google.golang.org/protobuf/encoding/protowire"
)

// The tests of this file hold the trace of a run to the store it was
// written from, read back by a decoder of their own (and protoc's): the
// tiny run of known events, and real llama.cpp runs recorded through the
// library (testkit/rectest) with op or scheduler probes.

// The recorder re-executes this test binary as the held child.
func TestMain(m *testing.M) { rectest.Main(m) }

// exportTrace writes the trace of the run in dir, as `iocorr export -i
// dir perfetto -o FILE` does, and returns the file.
func exportTrace(t *testing.T, dir string) string {
	t.Helper()
	path, _ := exportTraceWith(t, dir, perfetto.Options{})
	return path
}

// exportTraceWith is exportTrace with options, returning the summary too.
func exportTraceWith(t *testing.T, dir string, opt perfetto.Options) (string, perfetto.Summary) {
	t.Helper()
	st, meta := storetest.OpenRun(t, dir)
	path := filepath.Join(t.TempDir(), "trace.pftrace")
	sum, err := perfetto.WriteFile(path, st, meta, opt)
	if err != nil {
		t.Fatalf("writing the trace: %v", err)
	}
	return path, sum
}

// traceEvent and traceTrack are what the test's own decoder reads back,
// field by field, from the published field numbers.
type traceEvent struct {
	ts, track, typ   uint64
	name             string
	counter          int64
	flows, termFlows []uint64
	anns             map[string]string
}

type traceTrack struct {
	uuid, parent uint64
	name         string
	thread       bool
	tid          uint32
	counter      bool
}

type decodedTrace struct {
	tracks map[uint64]traceTrack
	events []traceEvent
}

// fields walks one message, failing on a malformed field.
func fields(t *testing.T, b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, u uint64)) {
	t.Helper()
	if err := protowalk.Fields(b, fn); err != nil {
		t.Fatal(err)
	}
}

// decodeTrace reads a trace with a schema of its own: every packet on
// sequence 1 is a track descriptor or a timestamped track event, every
// field one the exporter means to write. Event names, categories,
// annotation names and string values are interned: an id must be defined
// by the InternedData of its packet or an earlier one, once, on a packet
// that says it needs the sequence's incremental state.
func decodeTrace(t *testing.T, path string) decodedTrace {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := decodedTrace{tracks: map[uint64]traceTrack{}}
	// Interned strings by InternedData field (1 categories, 2 event names,
	// 3 annotation names, 29 annotation string values), then iid.
	interned := map[protowire.Number]map[uint64]string{1: {}, 2: {}, 3: {}, 29: {}}
	lookup := func(table protowire.Number, iid uint64) string {
		s, ok := interned[table][iid]
		if !ok {
			t.Fatalf("interned id %d of table %d used before its InternedData", iid, table)
		}
		return s
	}
	fields(t, raw, func(num protowire.Number, _ protowire.Type, packet []byte, _ uint64) {
		if num != 1 {
			t.Fatalf("Trace field %d, want only packets (1)", num)
		}
		var ts, seq, flags uint64
		var hasTS bool
		var ev *traceEvent
		// InternedData comes before the event that uses it (the exporter
		// writes it so); a decoder must not depend on that, so the event
		// is decoded after the packet's fields are read.
		var evBytes []byte
		fields(t, packet, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
			switch num {
			case 8:
				ts, hasTS = u, true
			case 10:
				seq = u
			case 13: // sequence_flags
				flags = u
			case 12: // interned_data
				fields(t, v, func(table protowire.Number, _ protowire.Type, v []byte, _ uint64) {
					if interned[table] == nil {
						t.Fatalf("InternedData field %d", table)
					}
					var iid uint64
					var str string
					fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
						switch num {
						case 1:
							iid = u
						case 2:
							str = string(v)
						default:
							t.Fatalf("interned entry field %d", num)
						}
					})
					if _, dup := interned[table][iid]; dup || iid == 0 {
						t.Fatalf("interned id %d of table %d defined twice or zero", iid, table)
					}
					interned[table][iid] = str
				})
			case 60:
				var tr traceTrack
				fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
					switch num {
					case 1:
						tr.uuid = u
					case 2:
						tr.name = string(v)
					case 3:
					case 4:
						tr.thread = true
						fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
							if num == 2 {
								tr.tid = uint32(u)
							}
						})
					case 5:
						tr.parent = u
					case 8:
						tr.counter = true
					default:
						t.Fatalf("TrackDescriptor field %d", num)
					}
				})
				if _, dup := d.tracks[tr.uuid]; dup || tr.uuid == 0 {
					t.Fatalf("track uuid %d reused or zero", tr.uuid)
				}
				d.tracks[tr.uuid] = tr
			case 11:
				evBytes = v
			default:
				t.Fatalf("TracePacket field %d", num)
			}
		})
		if evBytes != nil {
			if flags&2 == 0 {
				t.Fatalf("a track event packet without SEQ_NEEDS_INCREMENTAL_STATE (flags %d)", flags)
			}
			ev = &traceEvent{anns: map[string]string{}}
			fields(t, evBytes, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
				switch num {
				case 9:
					ev.typ = u
				case 11:
					ev.track = u
				case 3:
					lookup(1, u)
				case 10:
					ev.name = lookup(2, u)
				case 30:
					ev.counter = int64(u)
				case 47:
					ev.flows = append(ev.flows, u)
				case 48:
					ev.termFlows = append(ev.termFlows, u)
				case 4:
					var name, val string
					fields(t, v, func(num protowire.Number, _ protowire.Type, v []byte, u uint64) {
						switch num {
						case 1:
							name = lookup(3, u)
						case 17:
							val = lookup(29, u)
						case 3, 4:
							val = strconv.FormatInt(int64(u), 10)
						case 5:
							val = "float"
						default:
							t.Fatalf("DebugAnnotation field %d", num)
						}
					})
					ev.anns[name] = val
				default:
					t.Fatalf("TrackEvent field %d", num)
				}
			})
		}
		if seq != 1 {
			t.Fatalf("packet on sequence %d", seq)
		}
		if ev != nil {
			if !hasTS {
				t.Fatal("a track event without a timestamp")
			}
			ev.ts = ts
			d.events = append(d.events, *ev)
		}
	})
	return d
}

// checkTrace holds a trace to the rules a viewer relies on and to the
// store's counts; it returns the trace's slices and instants by name
// class.
func checkTrace(t *testing.T, dir, path string) map[string]int {
	t.Helper()
	// An independent decoder first: protoc knows nothing of iocorr.
	protoc, err := exec.LookPath("protoc")
	if err != nil {
		t.Fatalf("protoc (Debian's protobuf-compiler, make setup installs it): %v", err)
	}
	in, _ := os.Open(path)
	defer in.Close()
	cmd := exec.Command(protoc, "--decode_raw")
	cmd.Stdin = in
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.Len() == 0 {
		t.Fatalf("protoc --decode_raw: %v\n%s", err, errb.String())
	}

	d := decodeTrace(t, path)
	last := map[uint64]uint64{}
	depth := map[uint64]int{}
	flows, terms := map[uint64]int{}, map[uint64]int{}
	got := map[string]int{}
	for _, e := range d.events {
		tr, ok := d.tracks[e.track]
		if !ok {
			t.Fatalf("event %q on undescribed track %d", e.name, e.track)
		}
		if e.ts < last[e.track] {
			t.Fatalf("track %q goes back in time: %d after %d", tr.name, e.ts, last[e.track])
		}
		last[e.track] = e.ts
		switch e.typ {
		case 1:
			depth[e.track]++
			switch {
			case e.anns["token"] != "" && e.anns["phase"] != "":
				got["token"]++
			case e.anns["nodes"] != "":
				got["graph"]++
			case e.anns["node"] != "":
				got["op"]++
			case e.anns["call"] != "":
				got["read"]++
			case e.anns["bytes"] != "":
				got["block"]++
			}
		case 2:
			if depth[e.track]--; depth[e.track] < 0 {
				t.Fatalf("track %q ends a slice it never began", tr.name)
			}
		case 3:
			if e.anns["class"] != "" {
				got["fault"]++
			}
		case 4:
			if !tr.counter {
				t.Fatalf("counter value on track %q, not a counter track", tr.name)
			}
			got["counter"]++
		default:
			t.Fatalf("event type %d", e.typ)
		}
		for _, f := range e.flows {
			flows[f]++
		}
		for _, f := range e.termFlows {
			terms[f]++
		}
	}
	for tr, n := range depth {
		if n != 0 {
			t.Errorf("track %q leaves %d slices open", d.tracks[tr].name, n)
		}
	}
	for f, n := range flows {
		if n != 1 || terms[f] != 1 {
			t.Errorf("flow %d starts %d times and ends %d times", f, n, terms[f])
		}
	}
	got["flow"] = len(flows)

	// The store's counts: faults, block requests and read calls (distinct
	// request ids among their slices), timed tokens.
	st, err := index.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	want := map[string]int{}
	reqs, calls := map[uint32]bool{}, map[uint32]bool{}
	err = st.Events(index.EventFilter{}, func(e *event.Event) error {
		switch e.Kind {
		case event.KindFault:
			want["fault"]++
		case event.KindBlock:
			reqs[e.Req] = true
		case event.KindRead:
			calls[e.Req] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want["block"], want["read"] = len(reqs), len(calls)
	toks, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range toks {
		if tk.StartNS != 0 {
			want["token"]++
		}
	}
	for _, k := range []string{"fault", "block", "token", "read"} {
		if got[k] != want[k] {
			t.Errorf("%s: %d in the trace, %d in the store", k, got[k], want[k])
		}
	}
	return got
}

func TestPerfettoTraceOfTheTinyRunHoldsWhatTheStoreHolds(t *testing.T) {
	dir := rectest.TinyRun(t)
	path := exportTrace(t, dir)
	got := checkTrace(t, dir, path)
	if got["fault"] != 10 || got["token"] != 3 || got["block"] != 3 || got["counter"] == 0 {
		t.Errorf("trace holds %v; the tiny run has 10 faults, 3 tokens, 3 block reads and counters", got)
	}
}

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

// Past its bound on instants a trace folds faults into per-thread
// counters, says so, and loses no fault from the counts.
func TestPerfettoTraceFoldsFaultsIntoCountersPastItsBound(t *testing.T) {
	path, sum := exportTraceWith(t, rectest.TinyRun(t), perfetto.Options{MaxInstants: 5})
	if sum.Downsampled == "" || sum.Faults != 0 {
		t.Errorf("summary %+v: want faults downsampled and no fault instant", sum)
	}
	d := decodeTrace(t, path)
	var counted int64
	noted := false
	for _, e := range d.events {
		if e.typ == 3 && e.anns["class"] != "" {
			t.Fatalf("a fault instant past the bound: %+v", e)
		}
		if e.typ == 4 && d.tracks[e.track].name == "page faults per interval" {
			counted += e.counter
		}
		noted = noted || e.name == "faults downsampled"
	}
	if counted != 10 || !noted {
		t.Errorf("fault counters sum to %d (want the tiny run's 10); the trace says so: %v", counted, noted)
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
		case uint32(bpf.IocorrEventTypeEV_SCHED):
			e := (*bpf.IocorrSchedEvent)(unsafe.Pointer(&rec[0]))
			if e.Kind == uint32(bpf.IocorrSchedKindSCHEDEV_SWITCH) && int(e.NextTgid) == meta.Child.PID {
				switchIns[e.NextTid]++
			}
		case uint32(bpf.IocorrEventTypeEV_DECODE_BEGIN):
			decodeTid = (*bpf.IocorrEventHdr)(unsafe.Pointer(&rec[0])).Tid
		}
	})
	path := exportTrace(t, dir)
	checkTrace(t, dir, path)
	d := decodeTrace(t, path)
	running, blocked := map[uint32]int{}, 0
	tidOf := map[uint64]uint32{} // state track → its thread
	for uuid, tr := range d.tracks {
		if tr.name == "thread state" {
			parent := d.tracks[tr.parent]
			if !parent.thread {
				t.Fatalf("state track %d is not under a thread track", uuid)
			}
			tidOf[uuid] = parent.tid
		}
	}
	for _, e := range d.events {
		tid, ok := tidOf[e.track]
		if !ok || e.typ != 1 {
			continue
		}
		switch e.name {
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
