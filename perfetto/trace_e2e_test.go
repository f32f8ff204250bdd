package perfetto_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/perfetto"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/perfettotest"
	"github.com/iocorr/iocorr/testkit/runtest"
	"github.com/iocorr/iocorr/testkit/storetest"
)

// The tests of this file and of trace_recorded_test.go hold the trace of
// a run to the store it was written from, read back by a decoder of their
// own (and protoc's): here the tiny run of known events, which builds
// wherever the read side does; there real llama.cpp runs recorded through
// the library (testkit/rectest) with op or scheduler probes, on Linux.

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
	run := storetest.OpenRun(t, dir)
	path := filepath.Join(t.TempDir(), "trace.pftrace")
	sum, err := perfetto.WriteFile(path, run, opt)
	if err != nil {
		t.Fatalf("writing the trace: %v", err)
	}
	return path, sum
}

// decodeTrace reads the trace file at path with the test kit's decoder.
func decodeTrace(t *testing.T, path string) perfettotest.Trace {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return perfettotest.Decode(t, raw)
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
	for _, e := range d.Events {
		tr, ok := d.Tracks[e.Track]
		if !ok {
			t.Fatalf("event %q on undescribed track %d", e.Name, e.Track)
		}
		if e.TS < last[e.Track] {
			t.Fatalf("track %q goes back in time: %d after %d", tr.Name, e.TS, last[e.Track])
		}
		last[e.Track] = e.TS
		switch e.Type {
		case 1:
			depth[e.Track]++
			switch {
			case e.Anns["token"] != "" && e.Anns["phase"] != "":
				got["token"]++
			case e.Anns["nodes"] != "":
				got["graph"]++
			case e.Anns["node"] != "":
				got["op"]++
			case e.Anns["call"] != "":
				got["read"]++
			case e.Anns["bytes"] != "":
				got["block"]++
			}
		case 2:
			if depth[e.Track]--; depth[e.Track] < 0 {
				t.Fatalf("track %q ends a slice it never began", tr.Name)
			}
		case 3:
			if e.Anns["class"] != "" {
				got["fault"]++
			}
		case 4:
			if !tr.Counter {
				t.Fatalf("counter value on track %q, not a counter track", tr.Name)
			}
			got["counter"]++
		default:
			t.Fatalf("event type %d", e.Type)
		}
		for _, f := range e.Flows {
			flows[f]++
		}
		for _, f := range e.TermFlows {
			terms[f]++
		}
	}
	for tr, n := range depth {
		if n != 0 {
			t.Errorf("track %q leaves %d slices open", d.Tracks[tr].Name, n)
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
	st := storetest.Open(t, dir)
	want := map[string]int{}
	reqs, calls := map[uint32]bool{}, map[uint32]bool{}
	err = st.Events(store.EventFilter{}, func(e *event.Event) error {
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
	dir := runtest.TinyRun(t)
	path := exportTrace(t, dir)
	got := checkTrace(t, dir, path)
	if got["fault"] != 10 || got["token"] != 3 || got["block"] != 3 || got["counter"] == 0 {
		t.Errorf("trace holds %v; the tiny run has 10 faults, 3 tokens, 3 block reads and counters", got)
	}
}

// Past its bound on instants a trace folds faults into per-thread
// counters, says so, and loses no fault from the counts.
func TestPerfettoTraceFoldsFaultsIntoCountersPastItsBound(t *testing.T) {
	path, sum := exportTraceWith(t, runtest.TinyRun(t), perfetto.Options{MaxInstants: 5})
	if sum.Downsampled == "" || sum.Faults != 0 {
		t.Errorf("summary %+v: want faults downsampled and no fault instant", sum)
	}
	d := decodeTrace(t, path)
	var counted int64
	noted := false
	for _, e := range d.Events {
		if e.Type == 3 && e.Anns["class"] != "" {
			t.Fatalf("a fault instant past the bound: %+v", e)
		}
		if e.Type == 4 && d.Tracks[e.Track].Name == "page faults per interval" {
			counted += e.Counter
		}
		noted = noted || e.Name == "faults downsampled"
	}
	if counted != 10 || !noted {
		t.Errorf("fault counters sum to %d (want the tiny run's 10); the trace says so: %v", counted, noted)
	}
}
