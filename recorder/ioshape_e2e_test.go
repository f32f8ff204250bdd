package recorder_test

import (
	"cmp"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/testkit/blocktrace"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/rectest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// oracleShape is what the ftrace oracle's issues and completions say of
// a set of llama_decode calls: the union of the requests' time on the
// device within them, and the requests' summed time within them.
type oracleShape struct{ wall, busy, area uint64 }

// oracleRequests pairs each completion the oracle saw with the last issue
// of a request at the same sector before it: a requeued request's time on
// the device starts at its last issue.
func oracleRequests(t *testing.T, ct *blocktrace.Trace) [][2]uint64 {
	t.Helper()
	issues := map[uint64][]uint64{} // sector → issue times, in order
	for _, is := range ct.Issues {
		issues[is.Sector] = append(issues[is.Sector], is.Ts)
	}
	var out [][2]uint64
	unpaired := 0
	for _, c := range ct.Completions {
		ts := issues[c.Sector]
		i, _ := slices.BinarySearch(ts, c.Ts+1) // issues at or before the completion
		if i == 0 {
			unpaired++
			continue
		}
		out = append(out, [2]uint64{ts[i-1], c.Ts})
	}
	if unpaired > 0 {
		t.Errorf("the oracle has %d completions of %d without an issue before them", unpaired, len(ct.Completions))
	}
	return out
}

// oracleOf sums, call by call, the requests' intervals clipped to each
// call: a sweep over the calls' boundary points, counting the requests
// open between each two.
func oracleOf(reqs [][2]uint64, calls [][2]uint64) oracleShape {
	var o oracleShape
	for _, c := range calls {
		o.wall += c[1] - c[0]
		type edge struct {
			at uint64
			d  int
		}
		var edges []edge
		for _, r := range reqs {
			s, e := max(r[0], c[0]), min(r[1], c[1])
			if s < e {
				edges = append(edges, edge{s, 1}, edge{e, -1})
			}
		}
		slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.d, b.d)) })
		open := 0
		for i, e := range edges {
			if i > 0 && open > 0 {
				d := e.at - edges[i-1].at
				o.busy += d
				o.area += d * uint64(open)
			}
			open += e.d
		}
	}
	return o
}

// stampSlack is how far one request's time on the device may differ
// between iocorr and the oracle for no fault of either: ftrace prints
// microseconds, and BPF and ftrace read the clock one after the other in
// the same tracepoint, at the issue and at the completion.
const stampSlack = 4 * time.Microsecond

// TestTheIOShapeEqualsTheBlockOracles records a cold MoE run under a
// memory limit beside the ftrace oracle of the model's read issues and
// completions, and holds stats' busy share and mean requests in flight,
// of every phase and every token it gives them for, to what the oracle's
// requests give within the same llama_decode calls: within 2%, plus the
// clocks' stampSlack a request. A row is NA only where iocorr's requests
// lack their completion (on this VM a completion run in softirq on top of
// one thread of the VM's agent reaches ftrace and no BPF program:
// docs/internals.md); at least one row must have its figures. It also
// holds the run to the disk profile kept for its disk, copied into
// meta.json.
func TestTheIOShapeEqualsTheBlockOracles(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, llmtest.MoE)
	md := openModelDisk(t, model)
	// A profile of the model's disk, kept where record looks: its figures
	// stand for a measure here (doctor's own test measures one); what is
	// tested is that the run carries it.
	t.Setenv(rundir.DiskProfilesEnv, filepath.Join(t.TempDir(), "disks"))
	kept := &rundir.DiskProfile{Device: "test", Measured: time.Now().UTC().Truncate(time.Second),
		Points: []rundir.DiskPoint{{Depth: 1, BlockBytes: 1 << 20, BytesPerSec: 2e9, MeanLatencyNs: 5e5}}}
	if err := rundir.WriteDiskProfile(md.Disk(), kept); err != nil {
		t.Fatal(err)
	}
	ct := blocktrace.StartTimed(t, md.Disk(), md.Sectors())
	dir := filepath.Join(t.TempDir(), "run")
	rectest.Record(t, dir, rectest.Options{Cold: true, MemLimit: llmtest.MemLimit},
		llmtest.CompletionArgs(llmtest.CLI(t, llmtest.Shared, "llama-completion"), model, 8)...)
	ct.Stop(t)
	m, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Disk == nil || m.Disk.Device != kept.Device || len(m.Disk.Points) != 1 || !reflect.DeepEqual(m.Disk.Points, kept.Points) {
		t.Errorf("meta.json's disk profile is %+v, want the one kept for the model's disk, %+v", m.Disk, kept)
	}
	run := storetest.OpenRun(t, dir)
	byPhase, byToken, err := stats.IOShape(run)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := run.Store.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	reqs := oracleRequests(t, ct)
	t.Logf("the oracle: %d issues, %d completions, %d requeues of the model's sectors; iocorr: %d block requests without completion",
		len(ct.Issues), len(ct.Completions), ct.Requeues, m.BlockIncomplete)
	timed := func(tk event.TokenInfo) bool { return tk.StartNS != 0 && tk.EndNS >= tk.StartNS }
	compared, na := 0, 0
	// check holds one row to the oracle's requests within calls.
	check := func(name string, tab *stats.Table, row []stats.Value, calls [][2]uint64) {
		t.Helper()
		busy, inFlight := row[tab.Col("busy_share")], row[tab.Col("requests_in_flight_mean")]
		n := row[tab.Col("requests")].I + row[tab.Col("requests_without_completion")].I
		if busy.NA != "" || inFlight.NA != "" {
			// NA is right only where requests lack their completion.
			if !strings.Contains(busy.NA+inFlight.NA, "no completion") {
				t.Errorf("%s: busy share NA (%s), requests in flight NA (%s)", name, busy.NA, inFlight.NA)
			}
			t.Logf("%s: NA: %s", name, busy.NA)
			na++
			return
		}
		o := oracleOf(reqs, calls)
		if o.busy == 0 {
			if n > 0 && busy.F > 0 {
				t.Errorf("%s: busy share %.4f of %d requests, and the oracle saw no request of the model within its calls", name, busy.F, n)
			}
			return
		}
		theirBusy, theirInFlight := float64(o.busy)/float64(o.wall), float64(o.area)/float64(o.busy)
		slack := float64(stampSlack.Nanoseconds() * n)
		t.Logf("%s: %d calls, busy share %.4f (oracle %.4f), requests in flight %.3f (oracle %.3f), %d requests, verdict %v",
			name, len(calls), busy.F, theirBusy, inFlight.F, theirInFlight, n, row[tab.Col("verdict")])
		for _, f := range []struct {
			name               string
			ours, their, clock float64
		}{
			{"busy share", busy.F, theirBusy, slack / float64(o.wall)},
			{"requests in flight", inFlight.F, theirInFlight, slack * (1 + theirInFlight) / float64(o.busy)},
		} {
			if math.Abs(f.ours-f.their) > 0.02*f.their+f.clock {
				t.Errorf("%s: %s %.4f, the oracle's %.4f: more than 2%% (and %.4f for the clocks) apart", name, f.name, f.ours, f.their, f.clock)
			}
		}
		compared++
	}
	for _, row := range byPhase.Rows {
		phase := row[0].S
		var calls [][2]uint64
		for _, tk := range tokens {
			if timed(tk) && (phase == "all" || event.PhaseName(tk.Phase) == phase) {
				calls = append(calls, [2]uint64{tk.StartNS, tk.EndNS})
			}
		}
		if len(calls) > 0 {
			check(phase, byPhase, row, calls)
		}
	}
	for _, row := range byToken.Rows {
		for _, tk := range tokens {
			if int64(tk.Token) == row[0].I && timed(tk) {
				check(fmt.Sprintf("token %d", tk.Token), byToken, row, [][2]uint64{{tk.StartNS, tk.EndNS}})
			}
		}
	}
	t.Logf("%d rows compared, %d NA", compared, na)
	if compared == 0 {
		t.Fatal("no row to compare: the run has no timed call with a request whose completion iocorr saw")
	}
}
