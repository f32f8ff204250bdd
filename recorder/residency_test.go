package recorder

import (
	"fmt"
	"math"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/iocorr/iocorr/event"
	"github.com/iocorr/iocorr/pipeline"
	"github.com/iocorr/iocorr/rundir"
	"github.com/iocorr/iocorr/stats"
	"github.com/iocorr/iocorr/store"
	"github.com/iocorr/iocorr/testkit/llmtest"
	"github.com/iocorr/iocorr/testkit/storetest"
	"github.com/iocorr/iocorr/testkit/testenv"
)

// The recorder's residency snapshots (mincore of its own mapping, taken
// soon after each token's start) against the page cache's history that
// the pagecache tier's tracepoints replay. The replay is exact at token
// starts (the kernel flushes its coalesced runs there) and at each
// snapshot's flush of them just after it, and a page's event stamped
// between two such points happened between them; so every page with no
// event from its token's start until the snapshot's flush kept one state
// throughout, and the snapshot must show it. (Up to the next token's
// start instead, a whole token under a memory limit, almost every page
// changed: a loaded run compared none.)
// Pages with events in that window are uncertain, and counted: they bound
// how far a snapshot taken after the start is from the start itself. So
// are pages whose read from the device had not completed by the token's
// start: the replay has a page from its add, before the read is even
// issued, and mincore only once the read has completed (a test run under
// load met 174 pages of a readahead window so, though runs alone never).
func TestResidencySnapshotsEqualThePageCacheReplay(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	run, snaps := sharedRunSnapshots(t)
	st, meta := run.Store, run.Meta
	if rs := meta.ResidencySnapshots; rs == nil || rs.Taken != uint64(len(snaps)) || len(snaps) == 0 {
		t.Fatalf("meta.json says %+v of the snapshots, the file holds %d", rs, len(snaps))
	}
	tokens, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	// The replay's exact points: every token start, every snapshot's
	// flush of the pending runs just after it, and the run's end.
	var marks []uint64
	for _, tk := range tokens {
		if tk.StartNS != 0 {
			marks = append(marks, tk.StartNS)
		}
	}
	flushed := 0
	for _, s := range snaps {
		if s.FlushedNS != 0 {
			marks = append(marks, s.FlushedNS)
			flushed++
		}
	}
	if flushed != len(snaps) {
		t.Errorf("%d of %d snapshots flushed the pending page-cache runs after them", flushed, len(snaps))
	}
	marks = append(marks, meta.MonoEndNS)
	slices.Sort(marks)
	marks = slices.Compact(marks)
	states, changed, err := stats.PageStates(run, marks)
	if err != nil {
		t.Fatal(err)
	}
	reads := deviceReads(t, st, meta)
	var compared, uncertain, inFlight, pages int
	var lags []uint64
	for _, s := range snaps {
		from, found := slices.BinarySearch(marks, s.MarkNS)
		if !found {
			t.Errorf("token %d: snapshot for a start at %d the store does not have", s.Token, s.MarkNS)
			continue
		}
		// Up to the flush after the snapshot (the first exact point at
		// or after its end).
		to, _ := slices.BinarySearch(marks, max(s.EndNS, s.FlushedNS))
		if to == len(marks) {
			to--
		}
		lags = append(lags, s.LagNS())
		reading := reads.inFlight(s.MarkNS, marks[to])
		for m, pm := range s.Models {
			if pm == nil {
				t.Errorf("token %d: model %d has no snapshot", s.Token, m)
				continue
			}
			mismatched := 0
			// The header is read before the model is known to the kernel
			// side (its adds are not in the replay); the tensor data after.
			data := int(meta.Models[m].DataOffset / int64(os.Getpagesize()))
			for p, want := range states[from][m] {
				if p < data {
					continue
				}
				pages++
				moved := false
				for w := from + 1; w <= to && !moved; w++ {
					moved = changed[w][m][p]
				}
				if moved {
					uncertain++
					continue
				}
				if reading[[2]int{m, p}] {
					inFlight++
					continue
				}
				compared++
				if got := pm.Has(int64(p)); got != want {
					if mismatched++; mismatched <= 5 {
						t.Errorf("token %d: page %d of model %d resident %v in the snapshot, %v in the replay from the token's start to after the snapshot", s.Token, p, m, got, want)
					}
				}
			}
			if mismatched > 5 {
				t.Errorf("token %d: %d pages differ", s.Token, mismatched)
			}
		}
	}
	if compared == 0 {
		t.Fatal("no page kept its state over a snapshot: the test compared nothing")
	}
	slices.Sort(lags)
	t.Logf("%d snapshots: %d page states equal to the replay, %d uncertain (an event between the token's start and the snapshot's end; %.1f%%), %d read from the device meanwhile; snapshot lag after the token's start: median %.1f ms, max %.1f ms",
		len(snaps), compared, uncertain, 100*float64(uncertain)/float64(pages), inFlight, float64(lags[len(lags)/2])/1e6, float64(lags[len(lags)-1])/1e6)
	// The snapshotter arms the kernel to wake the reader at the next
	// token start: a snapshot follows it by the wakeup and its own walk
	// (2–4 ms here), not by the reader's 100 ms poll (median 50 ms).
	if median := time.Duration(lags[len(lags)/2]); median > 25*time.Millisecond {
		t.Errorf("snapshots follow their token's start by %v (median): the armed wakeup did not come", median)
	}
}

// The default tier's figures from the snapshots and the device reads
// against the pagecache tier's replay, on the same run (the shared run
// records both). Refaults: a page read from the device again is a page
// added again after its eviction; the two agree within 5% over the run
// (0.2% apart on one run here, single tensors up to 20%: a folio that
// readahead added and reclaim dropped before its read is re-added without
// a second read, and a small tensor's pages are few). Per-token residency
// and the real hit rate are
// measured against the replay at the token's start, the snapshot's lag
// being the difference.
func TestDefaultTierFiguresAgreeWithThePageCacheReplay(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	run, snaps := sharedRunSnapshots(t)
	st, meta := run.Store, run.Meta
	replay, err := stats.Compute(run, stats.Options{K: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	// The same run read as the default tier would have recorded it.
	def := *meta
	def.Tier = rundir.TierDefault
	def.Probes = slices.Clone(meta.Probes)
	for i := range def.Probes {
		if def.Probes[i].Target == rundir.TracepointPageAdd {
			def.Probes[i].Error = "left off"
		}
	}
	fromSnaps, err := stats.Compute(&store.Run{Store: st, Meta: &def}, stats.Options{K: []int{1}, Snapshots: snaps})
	if err != nil {
		t.Fatal(err)
	}
	byTensor := func(rep *stats.Report, table, col string) map[string]stats.Value {
		tb := rep.Table(table)
		name, c := tb.Col("tensor"), tb.Col(col)
		out := map[string]stats.Value{}
		for _, r := range tb.Rows {
			out[r[name].S] = r[c]
		}
		return out
	}
	want, got := byTensor(replay, "tensors", "refault_pages"), byTensor(fromSnaps, "tensors", "refault_pages")
	var refaults, fromReads int64
	worst, worstName := 0.0, ""
	for name, w := range want {
		g := got[name]
		if g.NA != "" || w.NA != "" {
			t.Errorf("%s: refaults NA: %q from device reads, %q replayed", name, g.NA, w.NA)
			continue
		}
		refaults += w.I
		fromReads += g.I
		if w.I > 100 {
			if d := math.Abs(float64(g.I-w.I)) / float64(w.I); d > worst {
				worst, worstName = d, name
			}
		}
	}
	if refaults == 0 {
		t.Fatal("no refaults in the run: the comparison tests nothing")
	}
	if d := math.Abs(float64(fromReads-refaults)) / float64(refaults); d > 0.05 {
		t.Errorf("refaults: %d from device reads, %d replayed (%.1f%% apart)", fromReads, refaults, 100*d)
	}
	// Residency per token: the snapshot against the replay at the start.
	residency := func(rep *stats.Report) map[[2]string]stats.Value {
		tb := rep.Table("residency")
		tok, name, res := tb.Col("token"), tb.Col("tensor"), tb.Col("resident_pages")
		out := map[[2]string]stats.Value{}
		if err := tb.Each(func(r []stats.Value) error {
			out[[2]string{fmt.Sprint(r[tok].I), r[name].S}] = r[res]
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	rw, rg := residency(replay), residency(fromSnaps)
	var diff, total, measured int64
	for k, w := range rw {
		g := rg[k]
		if g.NA != "" || w.NA != "" {
			continue
		}
		measured++
		diff += max(g.I-w.I, w.I-g.I)
		total += w.I
	}
	if measured == 0 {
		t.Fatal("no token has residency from both")
	}
	hit := func(rep *stats.Report) stats.Value {
		tb := rep.Table("cache_sim")
		pol, h := tb.Col("policy"), tb.Col("hit_rate_ratio")
		for _, r := range tb.Rows {
			if r[pol].S == "real" {
				return r[h]
			}
		}
		return stats.Value{NA: "no real row"}
	}
	hr, hs := hit(replay), hit(fromSnaps)
	if hs.NA != "" {
		t.Errorf("real hit rate from snapshots NA: %s", hs.NA)
	}
	t.Logf("refaults: %d pages from device reads, %d replayed (%.2f%% apart; worst tensor over 100 pages %s, %.1f%%); residency per token × tensor from %d snapshots: %d (%.2f%%) of %d resident pages differ from the replay at the token's start; real hit rate %.4f from snapshots, %.4f replayed",
		fromReads, refaults, 100*math.Abs(float64(fromReads-refaults))/float64(refaults), worstName, 100*worst, len(snaps), diff, 100*float64(diff)/float64(total), total, hs.F, hr.F)
}

// With exact snapshots the kernel stops the process at each token's start
// and the recorder snapshots before resuming it: nothing of the process
// runs in between, so every page of every held snapshot must equal the
// page cache that the pagecache tier replays at that start, in the same
// run, with no page left uncertain; every token start has its snapshot,
// and one the kernel could not hold (its ring over half full) says so.
func TestExactSnapshotsEqualThePageCacheReplayAtEveryToken(t *testing.T) {
	testenv.RequireBPF(t)
	llmtest.Require(t)
	model := llmtest.Model(t, llmtest.MoE)
	dir, _, out := recordDriver(t, model, llmtest.Generation{Tokens: llmtest.RecordedTokens, Threads: 2}, func(o *Options) {
		o.Probes.PageCache, o.ExactSnapshots, o.Cold, o.MemLimit = true, true, true, llmtest.MemLimitBytes
	})
	if _, err := pipeline.Ingest(t.Context(), dir, pipeline.Options{}); err != nil {
		t.Fatalf("ingest: %v\n%s", err, out)
	}
	meta, err := rundir.ReadMeta(dir)
	if err != nil {
		t.Fatal(err)
	}
	for typ, n := range meta.Lost {
		if n > 0 {
			t.Fatalf("%d %s events lost: the replay is incomplete", n, typ)
		}
	}
	snaps, err := rundir.ReadSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := storetest.Open(t, dir)
	tokens, err := st.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	rs := meta.ResidencySnapshots
	if rs == nil || !rs.Exact || rs.Taken != uint64(len(snaps)) || rs.Throttled != 0 || rs.Replaced != 0 {
		t.Fatalf("meta.json says %+v of the snapshots, the file holds %d; want every one exact, none throttled or replaced", rs, len(snaps))
	}
	var marks []uint64
	for _, tk := range tokens {
		if tk.StartNS != 0 {
			marks = append(marks, tk.StartNS)
		}
	}
	if len(snaps) != len(marks) {
		t.Errorf("%d snapshots for %d token starts", len(snaps), len(marks))
	}
	marks = append(marks, meta.MonoEndNS)
	slices.Sort(marks)
	marks = slices.Compact(marks)
	states, _, err := stats.PageStates(&store.Run{Store: st, Meta: meta}, marks)
	if err != nil {
		t.Fatal(err)
	}
	var compared, resident, unheld int
	var pauses []uint64
	for _, s := range snaps {
		if !s.Held {
			unheld++
			continue
		}
		at, found := slices.BinarySearch(marks, s.MarkNS)
		if !found {
			t.Errorf("token %d: snapshot for a start at %d the store does not have", s.Token, s.MarkNS)
			continue
		}
		pauses = append(pauses, s.EndNS-s.MarkNS)
		for m, pm := range s.Models {
			if pm == nil {
				t.Errorf("token %d: model %d has no snapshot", s.Token, m)
				continue
			}
			var differ []int
			// The header is read before the model is known to the kernel
			// side (its adds are not in the replay); the tensor data after.
			data := int(meta.Models[m].DataOffset / int64(os.Getpagesize()))
			for p, want := range states[at][m] {
				if p < data {
					continue
				}
				compared++
				if want {
					resident++
				}
				if pm.Has(int64(p)) != want {
					differ = append(differ, p)
				}
			}
			if len(differ) > 0 {
				t.Errorf("token %d, model %d: %d pages differ from the replay at the token's start (first %v; snapshot %v of them)", s.Token, m, len(differ), differ[:min(5, len(differ))], pm.Has(int64(differ[0])))
			}
		}
	}
	if uint64(unheld) != rs.NotHeld {
		t.Errorf("%d snapshots not held, meta.json says %d", unheld, rs.NotHeld)
	}
	if resident == 0 {
		t.Fatal("no page resident at any held token start: the comparison tests nothing")
	}
	slices.Sort(pauses)
	t.Logf("%d exact snapshots, %d not held: %d page states of the held ones compared with the replay (%d resident); the process paused from its token's start to the snapshot's end: median %.1f ms, max %.1f ms, %.1f ms in all over a run of %.1f s",
		len(snaps), unheld, compared, resident, float64(pauses[len(pauses)/2])/1e6, float64(pauses[len(pauses)-1])/1e6, float64(sum(pauses))/1e6, meta.End.Sub(meta.Start).Seconds())
}

func sum(v []uint64) (s uint64) {
	for _, x := range v {
		s += x
	}
	return s
}

// sharedRunSnapshots opens the shared recorded run (llmtest.RecordedMoE):
// the run and its residency snapshots.
func sharedRunSnapshots(t *testing.T) (*store.Run, []rundir.Snapshot) {
	t.Helper()
	dir := llmtest.RecordedMoE(t).Dir
	run := storetest.OpenRun(t, dir)
	snaps, err := rundir.ReadSnapshots(dir)
	if err != nil {
		t.Fatal(err)
	}
	return run, snaps
}

// Snapshots keep to their duty share of the time while any page of a
// model is missing, and back off, doubling up to a second, while every
// model stays wholly resident; a page gone ends the back-off at once.
func TestSnapshotsBackOffWhileTheModelsStayWhollyResident(t *testing.T) {
	ms := time.Millisecond
	steps := []struct {
		took     time.Duration
		whole    bool
		wantWait time.Duration
	}{
		{ms, false, snapshotDuty * ms},
		{ms / 2, true, wholeBackoffMin},
		{ms / 2, true, 2 * wholeBackoffMin},
		{ms / 2, true, 4 * wholeBackoffMin},
		{ms / 2, true, 8 * wholeBackoffMin},
		{ms / 2, true, 16 * wholeBackoffMin},
		{ms / 2, true, wholeBackoffMax},
		{ms / 2, true, wholeBackoffMax},
		{40 * ms, true, snapshotDuty * 40 * ms}, // a walk longer than the back-off keeps the duty
		{ms, false, snapshotDuty * ms},
		{ms / 2, true, wholeBackoffMin},
	}
	var backoff time.Duration
	for i, s := range steps {
		var wait time.Duration
		wait, backoff = snapshotWait(s.took, backoff, s.whole)
		if wait != s.wantWait {
			t.Errorf("snapshot %d (took %v, wholly resident %v): next after %v, want %v", i, s.took, s.whole, wait, s.wantWait)
		}
	}
}

// pageRead is the model pages [first, end) a device read covered, with
// the read's issue and completion times.
type pageRead struct {
	model, first, end int
	issue, done       uint64
}

// pageReads are a run's device reads of model pages.
type pageReads []pageRead

// deviceReads collects the run's block reads of model pages.
func deviceReads(t *testing.T, st *store.Store, meta *rundir.Meta) pageReads {
	t.Helper()
	ps := int64(os.Getpagesize())
	var out pageReads
	err := st.Records(store.EventFilter{}, func(rec []event.Event) error {
		for i := range rec {
			e := &rec[i]
			if e.Kind != event.KindBlock || event.BlockWrite(e.Class) {
				continue
			}
			m, off, ok := event.FileOffset(st.Tensors, e)
			if !ok || m >= len(meta.Models) {
				continue
			}
			out = append(out, pageRead{m, int(off / ps), int((off + int64(e.Bytes) + ps - 1) / ps), e.Ts - e.Dur, e.Ts})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inFlight is the pages (model, page) whose read was not complete at
// from: completed at from or later, issued by to. A page with no page
// event in [from, to] was added before from, so such a read is its add's
// (a later add would be an event). A read whose completion BPF never saw
// (Dur 0) has its issue for both.
func (r pageReads) inFlight(from, to uint64) map[[2]int]bool {
	out := map[[2]int]bool{}
	for _, rd := range r {
		if rd.issue <= to && rd.done >= from {
			for p := rd.first; p < rd.end; p++ {
				out[[2]int{rd.model, p}] = true
			}
		}
	}
	return out
}

// Within the duty's wait a token start gets no snapshot, except the first
// decode token's (predict reads the non-file memory at decode starts, and
// a short cold run's prefill snapshot left none) and any an exact run's
// process waits for. A start is judged by when its token began, not by
// when the reader saw it: one seen a poll after the wait but begun
// inside it would trail its snapshot by that poll.
func TestAMarkWhoseTokenBeganWithinTheDutysWaitIsThrottledExceptTheFirstDecodeStart(t *testing.T) {
	const nextAt = uint64(10_000_000_000)
	before, after := nextAt-1, nextAt
	mark := func(decode bool, ts uint64) tokenMark { return tokenMark{token: 1, decode: decode, ts: ts} }
	cases := []struct {
		name        string
		m           tokenMark
		exact       bool
		decodeTaken bool
		want        bool
	}{
		{"a prefill start within the wait", mark(false, before), false, false, true},
		{"the first decode start within the wait", mark(true, before), false, false, false},
		{"a later decode start within the wait", mark(true, before), false, true, true},
		{"a decode start at the wait's end", mark(true, after), false, true, false},
		{"a prefill start after the wait", mark(false, after+1), false, false, false},
		{"an exact run's start within the wait", mark(false, before), true, true, false},
	}
	for _, c := range cases {
		if got := throttled(c.m, nextAt, c.exact, c.decodeTaken); got != c.want {
			t.Errorf("%s: throttled = %v, want %v", c.name, got, c.want)
		}
	}
}
